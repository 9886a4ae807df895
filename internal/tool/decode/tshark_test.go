package decode

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tsharkFields are the InfiniBand dissector's fields compared with roce
// decode --json, in the order tshark prints them. tshark 4.0 has no FECN
// and BECN fields: it shows BTH byte 4 as the first infiniband.reserved.
// It shows an AtomicETH's address and R_Key as infiniband.reth.va and
// r_key.
var tsharkFields = []string{
	"frame.number",
	"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.a",
	"infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.padcnt", "infiniband.bth.tver",
	"infiniband.bth.p_key", "infiniband.reserved",
	"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn",
	"infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt", "infiniband.atomicacketh.origremdt",
	"infiniband.immdt", "infiniband.ieth", "infiniband.deth.q_key", "infiniband.deth.srcqp",
	"infiniband.rdeth.eecnxt", "infiniband.invariant.crc",
	"infiniband.mad.mgmtclass", "infiniband.mad.method", "infiniband.mad.attributeid",
	"infiniband.mad.transactionid",
}

// tsharkBytesFields print their value as bare hex bytes.
var tsharkBytesFields = map[string]bool{"infiniband.reserved": true, "infiniband.immdt": true, "infiniband.ieth": true}

// runTshark returns tshark's fields for each InfiniBand frame of path, by
// frame number.
func runTshark(t *testing.T, path string) map[uint64]map[string]uint64 {
	t.Helper()
	args := []string{"-r", path, "-n", "--disable-heuristic", "rpcrdma_infiniband", "--disable-protocol", "nvme-rdma",
		"-Y", "infiniband", "-T", "fields", "-E", "occurrence=f", "-E", "header=n", "-E", "separator=/t"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark %s: %v", path, err)
	}
	rows := map[uint64]map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != len(tsharkFields) {
			t.Fatalf("tshark line with %d fields, want %d: %q", len(cols), len(tsharkFields), sc.Text())
		}
		row := map[string]uint64{}
		for i, c := range cols {
			if c == "" {
				continue
			}
			base := 0
			if tsharkBytesFields[tsharkFields[i]] {
				base = 16
			}
			v, err := strconv.ParseUint(c, base, 64)
			if err != nil {
				t.Fatalf("tshark field %s = %q: %v", tsharkFields[i], c, err)
			}
			row[tsharkFields[i]] = v
		}
		rows[row["frame.number"]] = row
	}
	return rows
}

// jsonUint returns the unsigned integer at path in a decoded JSON record,
// and false when a key is absent or null.
func jsonUint(t *testing.T, rec map[string]any, path ...string) (uint64, bool) {
	t.Helper()
	var v any = rec
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return 0, false
		}
		if v, ok = m[k]; !ok || v == nil {
			return 0, false
		}
	}
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseUint(x.String(), 10, 64)
		if err != nil {
			t.Fatalf("%v = %v: %v", path, x, err)
		}
		return n, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	t.Fatalf("%v is %T", path, v)
	return 0, false
}

// TestDecodeMatchesTshark compares roce decode --json, field for field,
// with Wireshark's InfiniBand dissector on every capture.
func TestDecodeMatchesTshark(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark is not on PATH")
	}
	// Each tshark field and where roce decode --json keeps it; for
	// reth.va and reth.r_key the AtomicETH is the alternative.
	pairs := []struct {
		field string
		json  []string
		alt   []string
	}{
		{"infiniband.bth.opcode", []string{"opcode"}, nil},
		{"infiniband.bth.destqp", []string{"dest_qp"}, nil},
		{"infiniband.bth.psn", []string{"psn"}, nil},
		{"infiniband.bth.a", []string{"ack_req"}, nil},
		{"infiniband.bth.se", []string{"se"}, nil},
		{"infiniband.bth.m", []string{"mig"}, nil},
		{"infiniband.bth.padcnt", []string{"pad"}, nil},
		{"infiniband.bth.tver", []string{"tver"}, nil},
		{"infiniband.bth.p_key", []string{"pkey"}, nil},
		{"infiniband.reth.va", []string{"reth", "va"}, []string{"atomic_eth", "va"}},
		{"infiniband.reth.r_key", []string{"reth", "rkey"}, []string{"atomic_eth", "rkey"}},
		{"infiniband.reth.dmalen", []string{"reth", "dma_len"}, nil},
		{"infiniband.aeth.syndrome", []string{"aeth", "syndrome"}, nil},
		{"infiniband.aeth.msn", []string{"aeth", "msn"}, nil},
		{"infiniband.atomiceth.swapdt", []string{"atomic_eth", "swap_add"}, nil},
		{"infiniband.atomiceth.cmpdt", []string{"atomic_eth", "compare"}, nil},
		{"infiniband.atomicacketh.origremdt", []string{"atomic_ack", "orig"}, nil},
		{"infiniband.immdt", []string{"imm"}, nil},
		{"infiniband.ieth", []string{"ieth", "rkey"}, nil},
		{"infiniband.deth.q_key", []string{"deth", "qkey"}, nil},
		{"infiniband.deth.srcqp", []string{"deth", "src_qp"}, nil},
		{"infiniband.rdeth.eecnxt", []string{"rdeth", "eecnxt"}, nil},
		{"infiniband.invariant.crc", []string{"icrc"}, nil},
		{"infiniband.mad.mgmtclass", []string{"mad", "class"}, nil},
		{"infiniband.mad.method", []string{"mad", "method"}, nil},
		{"infiniband.mad.attributeid", []string{"mad", "attr_id"}, nil},
		{"infiniband.mad.transactionid", []string{"mad", "tid"}, nil},
	}
	total, compared := 0, 0
	for _, path := range captureFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			ts := runTshark(t, path)
			recs := decodeJSON(t, nil, path)
			if len(recs) != len(ts) {
				t.Errorf("roce decode has %d RoCE packets, tshark %d", len(recs), len(ts))
			}
			for _, rec := range recs {
				frame, _ := jsonUint(t, rec, "frame")
				row, ok := ts[frame]
				if !ok {
					t.Errorf("frame %d: not an InfiniBand packet for tshark", frame)
					continue
				}
				total++
				for _, p := range pairs {
					want, inTshark := row[p.field]
					got, inJSON := jsonUint(t, rec, p.json...)
					if !inJSON && p.alt != nil {
						got, inJSON = jsonUint(t, rec, p.alt...)
					}
					if inTshark != inJSON || got != want {
						t.Errorf("frame %d: %s: tshark %d (present %v), roce decode %v %d (present %v)",
							frame, p.field, want, inTshark, p.json, got, inJSON)
					}
					compared++
				}
				// FECN and BECN are the top bits of BTH byte 4.
				b4 := row["infiniband.reserved"]
				for _, fb := range []struct {
					key string
					bit uint64
				}{{"fecn", 0x80}, {"becn", 0x40}} {
					if got, _ := jsonUint(t, rec, fb.key); got != (b4&fb.bit)/fb.bit {
						t.Errorf("frame %d: %s %d, BTH byte 4 is %#02x", frame, fb.key, got, b4)
					}
				}
			}
		})
	}
	t.Logf("%d packets, %d fields compared with tshark", total, compared)
}
