package perf

import (
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/oob"
)

// exchangeAndPrint runs the handshakes whose answers perftest prints:
// the local entries first, then the peer's as they come back.
func (r *session) exchangeAndPrint() error {
	for i := range r.local {
		r.printDest("local", &r.local[i])
	}
	for i := range r.local {
		d, err := r.pt.HandShake(r.ctx, r.local[i])
		if err != nil {
			return err
		}
		r.printDest("remote", &d)
	}
	return nil
}

// rdmaPrologue is what ib_write_bw, ib_read_bw and ib_atomic_bw do
// before the traffic (and the latency tests after latPrologue's first
// handshake): the entries and the connection, the printed entries, a
// barrier.
func (r *session) rdmaPrologue() error {
	if err := r.connect(); err != nil {
		return err
	}
	if err := r.exchangeAndPrint(); err != nil {
		return err
	}
	return r.pt.Barrier(r.ctx) // after moving the QPs to RTR
}

// sendPrologue is what ib_send_bw and ib_send_lat do before the
// traffic: the entries and the connection, a barrier, then the printed
// entries.
func (r *session) sendPrologue() error {
	if err := r.connect(); err != nil {
		return err
	}
	if err := r.pt.Barrier(r.ctx); err != nil {
		return err
	}
	return r.exchangeAndPrint()
}

// record keeps res as the run's result and prints its table row.
func (r *session) record(res *result) {
	r.result = res
	if res.bw != nil {
		r.printBW(res.bw)
	} else {
		r.printLat(res)
	}
}

// lineThenClose ends a run as ib_send_bw and ib_send_lat do: the line
// under the results, then the closing exchange, then the JSON object
// (--json).
func (r *session) lineThenClose() error {
	r.print(resultLine)
	if err := r.pt.CloseConnection(r.ctx); err != nil {
		return err
	}
	return r.printJSON()
}

// closeThenLine ends a run as ib_read_lat, ib_atomic_lat and a bandwidth
// server do: the closing exchange, then the line under the results, then
// the JSON object (--json).
func (r *session) closeThenLine() error {
	if err := r.pt.CloseConnection(r.ctx); err != nil {
		return err
	}
	r.print(resultLine)
	return r.printJSON()
}

// flowBW is ib_write_bw, ib_read_bw and ib_atomic_bw.
func (r *session) flowBW() error {
	if err := r.rdmaPrologue(); err != nil {
		return err
	}
	r.printBWTitle()
	if r.role == oob.Server {
		// The server waits for the client's traffic to end, then prints
		// the client's report; its device meanwhile used the CPU time it
		// reports as its own.
		var m sampler
		m.begin()
		err := r.pt.Barrier(r.ctx)
		u := m.end()
		r.passive = &u
		if err != nil {
			return err
		}
		rep, err := r.pt.ExchangeBWReports(r.ctx, oob.BWReport{})
		if err != nil {
			return err
		}
		r.record(&result{bw: &bwResult{size: rep.Size, iters: rep.Iters, peak: rep.BWPeak, avg: rep.BWAvg,
			rate: rep.MsgRateAvg}, fromPeer: true})
		return r.closeThenLine()
	}
	res, err := r.runBWClient()
	if err != nil {
		return err
	}
	r.record(res)
	r.print(resultLine)
	if err := r.pt.Barrier(r.ctx); err != nil {
		return err
	}
	if _, err := r.pt.ExchangeBWReports(r.ctx, res.bw.report()); err != nil {
		return err
	}
	if err := r.pt.CloseConnection(r.ctx); err != nil {
		return err
	}
	return r.printJSON()
}

// flowSendBW is ib_send_bw.
func (r *session) flowSendBW() error {
	if err := r.sendPrologue(); err != nil {
		return err
	}
	r.printBWTitle()
	if r.role == oob.Server {
		if err := r.postRecvs(); err != nil {
			return err
		}
	}
	if err := r.pt.Barrier(r.ctx); err != nil {
		return err
	}
	var res *result
	var err error
	if r.role == oob.Client {
		res, err = r.runBWClient()
	} else {
		res, err = r.runBWServer()
	}
	if err != nil {
		return err
	}
	r.record(res)
	return r.lineThenClose()
}

// flowSendLat is ib_send_lat.
func (r *session) flowSendLat() error {
	if err := r.sendPrologue(); err != nil {
		return err
	}
	r.printLatTitle()
	if err := r.postRecvs(); err != nil {
		return err
	}
	if err := r.pt.Barrier(r.ctx); err != nil { // the peer's receives are posted
		return err
	}
	res, err := r.runLatSend()
	if err != nil {
		return err
	}
	r.record(res)
	return r.lineThenClose()
}

// flowWriteLat is ib_write_lat, which ends without a closing exchange.
func (r *session) flowWriteLat() error {
	if err := r.latPrologue(); err != nil {
		return err
	}
	r.printLatTitle()
	res, err := r.runLatWrite()
	if err != nil {
		return err
	}
	r.record(res)
	r.print(resultLine)
	cli.Linger(r.ctx, r.soft)
	return r.printJSON()
}

// flowReadLat is ib_read_lat and ib_atomic_lat: only the client works;
// the server closes at once.
func (r *session) flowReadLat() error {
	if err := r.latPrologue(); err != nil {
		return err
	}
	if r.role == oob.Server {
		// The server's device answers the client's requests meanwhile:
		// what that costs is the CPU time until the closing exchange.
		var m sampler
		m.begin()
		err := r.pt.CloseConnection(r.ctx)
		u := m.end()
		r.passive = &u
		if err != nil {
			return err
		}
		r.print(resultLine)
		return r.printJSON()
	}
	r.printLatTitle()
	res, err := r.runLatRead()
	if err != nil {
		return err
	}
	r.record(res)
	return r.closeThenLine()
}

// latPrologue is what ib_write_lat, ib_read_lat and ib_atomic_lat do
// before the traffic: a handshake of the first entry, then rdmaPrologue.
func (r *session) latPrologue() error {
	if _, err := r.pt.HandShake(r.ctx, r.local[0]); err != nil {
		return err
	}
	return r.rdmaPrologue()
}
