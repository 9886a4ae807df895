package oob

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/goroce/goroce/bth"
)

// Sizes of perftest's messages.
const (
	// VersionLen is the size of the version message, a NUL-padded char[16].
	VersionLen = 16
	// SysDataLen is the size of each of the two system data messages.
	SysDataLen = 4
	// MTULen is the size of the MTU message for peers of version 5.31 and
	// later: one ASCII digit and a NUL.
	MTULen = 2
	// MTULenOld is the size of the MTU message for peers from 5.1 to 5.31:
	// sizeof(int), the digit, a NUL and two bytes that mean nothing.
	MTULenOld = 4
	// PerftestDestLen is the size of the per-QP handshake over TCP.
	PerftestDestLen = 108
	// PerftestDestCMLen is the size of the per-QP handshake with -R, where
	// it travels in an RC SEND as perftest's struct pingpong_dest: be32
	// lid, out_reads, qpn, psn, rkey, 4 bytes of padding, be64 vaddr,
	// gid[16], be32 srqn, be32 gid_index.
	PerftestDestCMLen = 56
	// ReportFieldLen is the size of each BW report message but iters for
	// old peers (which is 4 bytes).
	ReportFieldLen = 8
)

// PerftestVersion is the version perftest v4.5-0.17 announces, and the one
// a Perftest session announces unless configured otherwise.
const PerftestVersion = "6.06"

// MinPeerVersion is the oldest peer version perftest v4.5 accepts
// (check_version_compatibility).
const MinPeerVersion = 5.70

const expectedVersion = "a NUL-terminated printable version string in 16 bytes"

// EncodeVersion writes v NUL-padded to b[:VersionLen]. v must be 1 to 15
// printable ASCII characters.
func EncodeVersion(b []byte, v string) error {
	if len(b) < VersionLen {
		return invalid("encode version", "buffer of "+strconv.Itoa(len(b))+" bytes, need 16")
	}
	if len(v) == 0 || len(v) >= VersionLen || !printable([]byte(v)) {
		return invalid("encode version", "version "+strconv.Quote(v)+" is not 1 to 15 printable characters")
	}
	n := copy(b, v)
	clear(b[n:VersionLen])
	return nil
}

// ParseVersion returns the version string in a VersionLen-byte message: the
// printable text before the first NUL. What follows the NUL is ignored.
func ParseVersion(b []byte) (string, error) {
	const step = "parse perftest version"
	if len(b) != VersionLen {
		return "", formatError(step, expectedVersion, b, strconv.Itoa(len(b))+" bytes")
	}
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	switch {
	case n == len(b):
		return "", formatError(step, expectedVersion, b, "no NUL")
	case n == 0:
		return "", formatError(step, expectedVersion, b, "empty version")
	case !printable(b[:n]):
		return "", formatError(step, expectedVersion, b, "unprintable bytes")
	}
	return string(b[:n]), nil
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7E {
			return false
		}
	}
	return true
}

// Compat is what a peer's version implies for the rest of the exchange,
// decided as perftest v4.5-0.17 decides it: from atof of the version
// string, compared in double precision for the system data and
// compatibility checks and in single precision (a float parameter or
// variable in the C code) for the MTU and report checks. A Compat is a
// plain value.
type Compat struct {
	Version string  // as announced
	Number  float64 // atof(Version)
	// SysData: the system data messages are exchanged (>= 5.32).
	SysData bool
	// MTULen is the size of the MTU message: MTULen (>= 5.31), MTULenOld
	// (>= 5.1), or 0 when the MTU is not exchanged.
	MTULen int
	// Iters64: the report's iters field is 8 bytes (>= 5.33), else 4.
	Iters64 bool
}

// CompatFor returns what a peer announcing version implies.
func CompatFor(version string) Compat {
	n := atof(version)
	single := float64(float32(n))
	c := Compat{Version: version, Number: n, SysData: n >= 5.32, Iters64: single >= 5.33}
	switch {
	case single >= 5.31:
		c.MTULen = MTULen
	case single >= 5.1:
		c.MTULen = MTULenOld
	}
	return c
}

// atof parses the decimal number at the start of s as C's atof does for
// the strings perftest uses: leading spaces, a sign, digits, a fraction,
// an exponent; 0 when there is no number.
func atof(s string) float64 {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] >= '\t' && s[i] <= '\r') {
		i++
	}
	start := i
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i, digits = i+1, digits+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i, digits = i+1, digits+1
		}
	}
	if digits == 0 {
		return 0
	}
	end := i
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		k := j
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		if k > j {
			end = k
		}
	}
	// Out of range, ParseFloat returns ±Inf or 0 with an error, as
	// strtod does; the value is what atof would give.
	v, _ := strconv.ParseFloat(s[start:end], 64)
	return v
}

// SysData is what check_sys_data exchanges: the page size perftest cycles
// its buffers by and the cache line size. Each side keeps the larger of
// each (compared as C ints). Each field travels as its own SysDataLen-byte
// big-endian message. A SysData is a plain value.
type SysData struct {
	CycleBuffer   int32
	CacheLineSize int32
}

// DefaultSysData is what perftest sends on x86-64 Linux (as in the
// captures): a 4096-byte page and a 64-byte cache line. Treat it as a
// constant.
var DefaultSysData = SysData{CycleBuffer: 4096, CacheLineSize: 64}

// Encode writes the two messages back to back to b[:2*SysDataLen].
func (s SysData) Encode(b []byte) error {
	if len(b) < 2*SysDataLen {
		return invalid("encode sys data", "buffer of "+strconv.Itoa(len(b))+" bytes, need 8")
	}
	binary.BigEndian.PutUint32(b[0:], uint32(s.CycleBuffer))
	binary.BigEndian.PutUint32(b[4:], uint32(s.CacheLineSize))
	return nil
}

// ParseSysData reads the two messages, back to back, from b, which must be
// 2*SysDataLen bytes. Any values are valid.
func ParseSysData(b []byte) (SysData, error) {
	if len(b) != 2*SysDataLen {
		return SysData{}, formatError("parse sys data", "8 bytes", b, strconv.Itoa(len(b))+" bytes")
	}
	return SysData{
		CycleBuffer:   int32(binary.BigEndian.Uint32(b[0:])),
		CacheLineSize: int32(binary.BigEndian.Uint32(b[4:])),
	}, nil
}

// Agree returns what both sides settle on: the larger of each field.
func (s SysData) Agree(remote SysData) SysData {
	return SysData{CycleBuffer: max(s.CycleBuffer, remote.CycleBuffer), CacheLineSize: max(s.CacheLineSize, remote.CacheLineSize)}
}

// AgreeMTU returns the MTU both sides settle on: the remote one if it is
// valid and smaller than the local one, else the local one.
func AgreeMTU(local, remote bth.MTU) bth.MTU {
	if remote.Valid() && remote < local {
		return remote
	}
	return local
}

const expectedMTU = `an ibv_mtu digit 1-5 and a NUL ("3\0" for 1024)`

// EncodeMTU writes m's MTU message to b, which is MTULen or MTULenOld
// bytes: the ASCII digit, a NUL, and zeros.
func EncodeMTU(b []byte, m bth.MTU) error {
	if !m.Valid() {
		return invalid("encode MTU", "MTU "+m.String()+" is not an ibv_mtu value")
	}
	if len(b) != MTULen && len(b) != MTULenOld {
		return invalid("encode MTU", "buffer of "+strconv.Itoa(len(b))+" bytes, want 2 or 4")
	}
	clear(b)
	b[0] = '0' + byte(m)
	return nil
}

// ParseMTU parses an MTU message of MTULen or MTULenOld bytes: an ASCII
// digit from 1 to 5 and a NUL (the rest of a 4-byte message is ignored,
// since perftest leaves it uninitialised).
func ParseMTU(b []byte) (bth.MTU, error) {
	const step = "parse MTU"
	if len(b) != MTULen && len(b) != MTULenOld {
		return 0, formatError(step, expectedMTU, b, strconv.Itoa(len(b))+" bytes")
	}
	m := bth.MTU(b[0] - '0')
	if b[0] < '0' || b[0] > '9' || b[1] != 0 || !m.Valid() {
		return 0, formatError(step, expectedMTU, b, "")
	}
	return m, nil
}

// PerftestDest is one per-QP handshake entry of perftest (its struct
// pingpong_dest as it travels). A PerftestDest is a plain value.
type PerftestDest struct {
	LID      uint16
	OutReads uint16 // outstanding RDMA READs/atomics the QP accepts
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32 // XRC/DC only; 0 otherwise
}

const expectedPerftestDest = `"%04x:%04x:%06x:%06x:%08x:%016x:" + 16 * "%02x:" + "%08x:\0" (108 bytes)`

// Field layout of the 108-byte handshake: offset and width of the hex
// fields, each followed by ':'.
const (
	pdLID, pdOutReads, pdQPN, pdPSN, pdRKey, pdVAddr, pdGID = 0, 5, 10, 17, 24, 33, 50
	pdSRQN                                                  = pdGID + 16*3
	pdNUL                                                   = pdSRQN + 9
)

var pdFields = [...]struct{ off, n int }{
	{pdLID, 4}, {pdOutReads, 4}, {pdQPN, 6}, {pdPSN, 6}, {pdRKey, 8}, {pdVAddr, 16},
}

// Encode writes d's PerftestDestLen-byte handshake to b[:PerftestDestLen].
// It fails with ErrInvalid if b is shorter or if QPN or PSN does not fit in
// 24 bits.
func (d *PerftestDest) Encode(b []byte) error {
	if d == nil {
		return invalid("encode perftest handshake", "nil *PerftestDest")
	}
	if len(b) < PerftestDestLen {
		return invalid("encode perftest handshake", "buffer of "+strconv.Itoa(len(b))+" bytes, need 108")
	}
	if d.QPN > maxQPN || d.PSN > maxQPN {
		return invalid("encode perftest handshake", "QPN 0x"+strconv.FormatUint(uint64(d.QPN), 16)+
			" or PSN 0x"+strconv.FormatUint(uint64(d.PSN), 16)+" wider than 24 bits")
	}
	vals := [...]uint64{uint64(d.LID), uint64(d.OutReads), uint64(d.QPN), uint64(d.PSN), uint64(d.RKey), d.VAddr}
	for i, f := range pdFields {
		putHex(b[f.off:f.off+f.n], vals[i])
		b[f.off+f.n] = ':'
	}
	for i, g := range d.GID {
		o := pdGID + 3*i
		b[o], b[o+1], b[o+2] = hexDigits[g>>4], hexDigits[g&0xF], ':'
	}
	putHex(b[pdSRQN:pdSRQN+8], uint64(d.SRQN))
	b[pdSRQN+8] = ':'
	b[pdNUL] = 0
	return nil
}

// ParsePerftestDest parses a PerftestDestLen-byte handshake. Hex digits may
// be of either case; everything else must be exactly as Encode writes it.
func ParsePerftestDest(b []byte) (PerftestDest, error) {
	const step = "parse perftest handshake"
	if len(b) != PerftestDestLen {
		return PerftestDest{}, formatError(step, expectedPerftestDest, b, strconv.Itoa(len(b))+" bytes")
	}
	if b[pdNUL] != 0 {
		return PerftestDest{}, formatError(step, expectedPerftestDest, b, "no NUL at offset 107")
	}
	var vals [len(pdFields)]uint64
	hexField := func(off, n int) (uint64, error) {
		if b[off+n] != ':' {
			return 0, formatError(step, expectedPerftestDest, b, "no ':' at offset "+strconv.Itoa(off+n))
		}
		v, bad, ok := getHex(b[off : off+n])
		if !ok {
			return 0, formatError(step, expectedPerftestDest, b, "not a hex digit at offset "+strconv.Itoa(off+bad))
		}
		return v, nil
	}
	for i, f := range pdFields {
		v, err := hexField(f.off, f.n)
		if err != nil {
			return PerftestDest{}, err
		}
		vals[i] = v
	}
	d := PerftestDest{
		LID: uint16(vals[0]), OutReads: uint16(vals[1]), QPN: uint32(vals[2]), PSN: uint32(vals[3]),
		RKey: uint32(vals[4]), VAddr: vals[5],
	}
	for i := range d.GID {
		v, err := hexField(pdGID+3*i, 2)
		if err != nil {
			return PerftestDest{}, err
		}
		d.GID[i] = byte(v)
	}
	srqn, err := hexField(pdSRQN, 8)
	if err != nil {
		return PerftestDest{}, err
	}
	d.SRQN = uint32(srqn)
	return d, nil
}

// EncodeCM writes d as the PerftestDestCMLen-byte binary handshake perftest
// sends over an rdma_cm connection (-R), with the local GID index, to
// b[:PerftestDestCMLen]. The padding is written as zeros.
func (d *PerftestDest) EncodeCM(b []byte, gidIndex int32) error {
	const step = "encode perftest rdma_cm handshake"
	switch {
	case d == nil:
		return invalid(step, "nil *PerftestDest")
	case len(b) < PerftestDestCMLen:
		return invalid(step, "buffer of "+strconv.Itoa(len(b))+" bytes, need 56")
	case d.QPN > maxQPN || d.PSN > maxQPN:
		return invalid(step, "QPN 0x"+strconv.FormatUint(uint64(d.QPN), 16)+
			" or PSN 0x"+strconv.FormatUint(uint64(d.PSN), 16)+" wider than 24 bits")
	}
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(d.LID))
	be.PutUint32(b[4:], uint32(d.OutReads))
	be.PutUint32(b[8:], d.QPN)
	be.PutUint32(b[12:], d.PSN)
	be.PutUint32(b[16:], d.RKey)
	be.PutUint32(b[20:], 0)
	be.PutUint64(b[24:], d.VAddr)
	copy(b[32:48], d.GID[:])
	be.PutUint32(b[48:], d.SRQN)
	be.PutUint32(b[52:], uint32(gidIndex))
	return nil
}

// ParsePerftestDestCM parses the PerftestDestCMLen-byte binary handshake of
// perftest's -R mode and returns it with the sender's GID index. As
// perftest does, it ignores the padding; values too wide for their field
// (a LID above 0xffff, a QPN above 24 bits) are errors.
func ParsePerftestDestCM(b []byte) (PerftestDest, int32, error) {
	const step = "parse perftest rdma_cm handshake"
	const expected = "a 56-byte struct pingpong_dest, big-endian"
	if len(b) != PerftestDestCMLen {
		return PerftestDest{}, 0, formatError(step, expected, b, strconv.Itoa(len(b))+" bytes")
	}
	be := binary.BigEndian
	lid, outReads := be.Uint32(b[0:]), be.Uint32(b[4:])
	qpn, psn := be.Uint32(b[8:]), be.Uint32(b[12:])
	if lid > 0xFFFF || outReads > 0xFFFF || qpn > maxQPN || psn > maxQPN {
		return PerftestDest{}, 0, formatError(step, expected, b, "lid, out_reads, qpn or psn out of range")
	}
	d := PerftestDest{
		LID: uint16(lid), OutReads: uint16(outReads), QPN: qpn, PSN: psn,
		RKey: be.Uint32(b[16:]), VAddr: be.Uint64(b[24:]), SRQN: be.Uint32(b[48:]),
	}
	copy(d.GID[:], b[32:48])
	return d, int32(be.Uint32(b[52:])), nil
}

// BWReport is what xchg_bw_reports exchanges at the end of a BW test. A
// BWReport is a plain value.
//
// Each field travels as its own message, in this order: Size (8 bytes, a C
// unsigned long on LP64), Iters (8 bytes for peers >= 5.33, else 4), then
// BWPeak, BWAvg and MsgRateAvg, and with --report-per-port BWAvgP1,
// MsgRateAvgP1, BWAvgP2, MsgRateAvgP2: integers big-endian, doubles as
// their IEEE 754 bits big-endian (perftest byte-swaps the double on a
// little-endian host). A half-duplex perftest server sends whatever its
// report struct held, which is not meaningful.
type BWReport struct {
	Size         uint64 // message size in bytes
	Iters        uint64
	BWPeak       float64 // MiB/s or Gb/s, as the run reports
	BWAvg        float64
	MsgRateAvg   float64 // Mpps
	BWAvgP1      float64
	MsgRateAvgP1 float64
	BWAvgP2      float64
	MsgRateAvgP2 float64
}

// BWReportFields returns the size of each message of the BW report
// exchange, in order, for a peer c, with or without the per-port fields.
func BWReportFields(c Compat, perPort bool) []int {
	iters := 4
	if c.Iters64 {
		iters = 8
	}
	f := []int{8, iters, 8, 8, 8}
	if perPort {
		f = append(f, 8, 8, 8, 8)
	}
	return f
}

// BWReportLen returns the total size of the BW report messages.
func BWReportLen(c Compat, perPort bool) int {
	n := 5 * 8
	if !c.Iters64 {
		n -= 4
	}
	if perPort {
		n += 4 * 8
	}
	return n
}

// Encode writes the BW report messages back to back to
// b[:BWReportLen(c, perPort)] and returns their total size. With a 4-byte
// iters field the count is truncated to 32 bits, as perftest does.
func (r *BWReport) Encode(b []byte, c Compat, perPort bool) (int, error) {
	const step = "encode BW report"
	switch {
	case r == nil:
		return 0, invalid(step, "nil *BWReport")
	case len(b) < BWReportLen(c, perPort):
		return 0, invalid(step, "buffer of "+strconv.Itoa(len(b))+" bytes, need "+strconv.Itoa(BWReportLen(c, perPort)))
	}
	be := binary.BigEndian
	be.PutUint64(b, r.Size)
	n := 8
	if c.Iters64 {
		be.PutUint64(b[n:], r.Iters)
		n += 8
	} else {
		be.PutUint32(b[n:], uint32(r.Iters))
		n += 4
	}
	doubles := [...]float64{r.BWPeak, r.BWAvg, r.MsgRateAvg, r.BWAvgP1, r.MsgRateAvgP1, r.BWAvgP2, r.MsgRateAvgP2}
	k := 3
	if perPort {
		k = len(doubles)
	}
	for _, v := range doubles[:k] {
		be.PutUint64(b[n:], math.Float64bits(v))
		n += 8
	}
	return n, nil
}

// ParseBWReport parses the BW report messages, back to back, from b, which
// must be exactly BWReportLen(c, perPort) bytes. Any bits are a valid
// report (the server's often are not meaningful), so only the length can
// be wrong.
func ParseBWReport(b []byte, c Compat, perPort bool) (BWReport, error) {
	if len(b) != BWReportLen(c, perPort) {
		return BWReport{}, formatError("parse BW report", strconv.Itoa(BWReportLen(c, perPort))+" bytes", b, strconv.Itoa(len(b))+" bytes")
	}
	be := binary.BigEndian
	r := BWReport{Size: be.Uint64(b)}
	n := 8
	if c.Iters64 {
		r.Iters = be.Uint64(b[n:])
		n += 8
	} else {
		r.Iters = uint64(be.Uint32(b[n:]))
		n += 4
	}
	doubles := [...]*float64{&r.BWPeak, &r.BWAvg, &r.MsgRateAvg, &r.BWAvgP1, &r.MsgRateAvgP1, &r.BWAvgP2, &r.MsgRateAvgP2}
	k := 3
	if perPort {
		k = len(doubles)
	}
	for _, p := range doubles[:k] {
		*p = math.Float64frombits(be.Uint64(b[n:]))
		n += 8
	}
	return r, nil
}
