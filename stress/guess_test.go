//go:build linux

package stress

import (
	"bytes"
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// TestKeyGuessing: an attacker with a UC connection of its own to a
// device, who knows the address and length of a region there but not
// its rkey, sends WRITEs with guessed rkeys as fast as it can. UC drops a
// bad key silently and the connection stays up (an RC connection goes to
// ERR at the first bad key, so there each guess costs the attacker a
// connection), so this is the fastest guessing there is. No guess may
// land; every one must be counted; the rate the device absorbs and the
// expected time to a hit with 32-bit keys that are all random are
// reported.
func TestKeyGuessing(t *testing.T) {
	ips := loopbacks(2)
	port := freePort(t, ips...)
	v := newSide(t, openDev(t, ips[0], port, nil), 64)
	target := v.reg(t, 1<<20, verbs.LocalWrite|verbs.RemoteWrite)
	keys := map[uint32]bool{target.RKey(): true}
	const live = 1000 // more live regions: more keys that pass the key check
	for range live - 1 {
		keys[v.reg(t, 64, verbs.LocalWrite|verbs.RemoteWrite).RKey()] = true
	}
	want := bytes.Clone(target.Bytes())
	uc, err := v.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.UC, SendCQ: v.cq, RecvCQ: v.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	psn := rand.Uint32() & 0xFFFFFF
	if err := roce.Connect(uc, &roce.Remote{QPN: 0x777, PSN: psn, GID: verbs.GIDFromAddr(ips[1])},
		&roce.ConnParams{MTU: bth.MTU1024}); err != nil {
		t.Fatal(err)
	}
	h := newHostile(t, netip.AddrPortFrom(ips[1], 0), netip.AddrPortFrom(ips[0], port))
	guesses := &floodClass{name: "guessed rkeys", from: h}
	for i := range 4096 {
		k := rand.Uint32()
		for keys[k] {
			k = rand.Uint32()
		}
		guesses.pkts = append(guesses.pkts, h.build(pkt{op: bth.UCWriteOnly, qpn: uc.QPN(), psn: bth.PSN(psn).Add(uint32(i)),
			payload: 64, reth: &bth.RETHFields{VA: target.Addr() + uint64(rand.IntN(target.Len()-64)), RKey: k, DMALen: 64}}))
	}
	d := time.Second
	if long() {
		d = 10 * time.Second
	}
	before := uc.(*qp.QP).Counters()
	drops0 := socketDrops(netip.AddrPortFrom(ips[0], port))
	wait := floodFrom(t, []*floodClass{guesses}, d, 0)
	t0 := time.Now()
	sent := wait()
	el := time.Since(t0)
	quiet(t, v.dev)
	after := uc.(*qp.QP).Counters()
	drops := socketDrops(netip.AddrPortFrom(ips[0], port)) - drops0
	counted := int(after.DropUCMessage - before.DropUCMessage)
	if counted > sent || sent-counted > int(drops) {
		t.Errorf("%d guesses sent, %d counted as dropped, %d lost at the socket", sent, counted, drops)
	}
	syncMR(target)
	if !bytes.Equal(target.Bytes(), want) {
		t.Fatal("a guessed rkey wrote into the region")
	}
	if st := state(t, uc); st != verbs.StateRTS {
		t.Errorf("the attacker's UC connection is in %v", st)
	}
	rate := float64(counted) / el.Seconds()
	// One key opens the region: a guesser that never repeats a guess
	// needs 2^31 on average.
	hit := time.Duration(math.Pow(2, 31) / rate * float64(time.Second))
	summary(t, "%d guesses in %.1f s, %.0f a second taken by the device (%d lost at its socket), none landed; "+
		"expected time to hit one region's key: %.1f h (2^31 guesses; with the sequential 24-bit index keys "+
		"had before, about 128 guesses from a known key: %.1f ms)", sent, el.Seconds(), rate, drops,
		hit.Hours(), 128/rate*1e3)
}

// quiet waits until d has received nothing for 200 ms (at most 20 s).
func quiet(t testing.TB, d *roce.Device) {
	t.Helper()
	last := d.Stats().Link
	for range 100 {
		time.Sleep(200 * time.Millisecond)
		now := d.Stats().Link
		if now == last {
			return
		}
		last = now
	}
	t.Error("the device kept receiving for 20 s")
}
