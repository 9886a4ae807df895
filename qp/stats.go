package qp

import (
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/goroce/goroce/bth"
)

// Counters are a queue pair's (or, summed, a device's) protocol counters,
// named after rxe's hardware counters as `rdma statistic` shows them where
// rxe has one (mlx5's for congestion control). All are cumulative but the
// CCMode gauges.
type Counters struct {
	SentPkts uint64 `rdma:"sent_pkts"`
	RcvdPkts uint64 `rdma:"rcvd_pkts"`
	// Retransmits counts request packets sent again (go-back-N).
	Retransmits uint64 `rdma:"retransmitted_pkts"`
	// DuplicateRequest and OutOfSeqRequest count request packets the
	// responder saw again or too early.
	DuplicateRequest uint64 `rdma:"duplicate_request"`
	OutOfSeqRequest  uint64 `rdma:"out_of_seq_request"`
	// RcvdRNRErr and SendRNRErr count RNR NAKs received and sent.
	RcvdRNRErr uint64 `rdma:"rcvd_rnr_err"`
	SendRNRErr uint64 `rdma:"send_rnr_err"`
	// RcvdSeqErr and SendSeqErr count PSN-sequence-error NAKs.
	RcvdSeqErr uint64 `rdma:"rcvd_seq_err"`
	SendSeqErr uint64 `rdma:"send_seq_err"`
	// RcvdNAKs and SentNAKs count the other NAKs by code: invalid
	// request, remote access error, remote operational error.
	RcvdInvReqNAK    uint64 `rdma:"rcvd_inv_req_nak"`
	RcvdRemAccessNAK uint64 `rdma:"rcvd_rem_access_nak"`
	RcvdRemOpNAK     uint64 `rdma:"rcvd_rem_op_nak"`
	SentInvReqNAK    uint64 `rdma:"sent_inv_req_nak"`
	SentRemAccessNAK uint64 `rdma:"sent_rem_access_nak"`
	SentRemOpNAK     uint64 `rdma:"sent_rem_op_nak"`
	// AcksSent and AcksRcvd count ACK packets (not READ responses).
	AcksSent uint64 `rdma:"acks_sent"`
	AcksRcvd uint64 `rdma:"acks_rcvd"`
	// AckDeferred counts ACKs folded into a later one (coalescing).
	AckDeferred uint64 `rdma:"ack_deferred"`
	// CompleterRetryErr counts retries: timeouts and retried NAKs.
	CompleterRetryErr uint64 `rdma:"completer_retry_err"`
	// LocalACKTimeoutErr counts the retries of the local ACK timeout
	// among them (mlx5's counter of that name).
	LocalACKTimeoutErr uint64 `rdma:"local_ack_timeout_err"`
	// LossProbes counts packets sent again, alone, after a probe
	// timeout without progress (qp/probe.go): no retry is counted.
	LossProbes          uint64 `rdma:"loss_probes"`
	RetryExceededErr    uint64 `rdma:"retry_exceeded_err"`
	RetryRNRExceededErr uint64 `rdma:"retry_rnr_exceeded_err"`
	// RDMASends and RDMARecvs count SEND messages sent and received.
	RDMASends uint64 `rdma:"rdma_sends"`
	RDMARecvs uint64 `rdma:"rdma_recvs"`
	// Drops the QP made, by reason.
	DropBadAddr   uint64 `rdma:"drop_bad_addr"`
	DropBadState  uint64 `rdma:"drop_bad_state"`
	DropBadQKey   uint64 `rdma:"drop_bad_qkey"`
	DropBadPKey   uint64 `rdma:"drop_bad_pkey"`
	DropBadOpcode uint64 `rdma:"drop_bad_opcode"`
	DropNoRecv    uint64 `rdma:"drop_no_recv"`
	DropBadResp   uint64 `rdma:"drop_bad_resp"`
	DropUCMessage uint64 `rdma:"drop_uc_message"`
	DropSilentPSN uint64 `rdma:"drop_after_nak"`
	// DropFarPSN counts RC requests further ahead of the expected PSN
	// than Config.SeqNAKWindow: dropped without a NAK.
	DropFarPSN     uint64 `rdma:"drop_far_psn"`
	DropDuplicates uint64 `rdma:"drop_duplicate_unknown"`

	// DropUnexpectedResp counts responses that answer no outstanding
	// request: nothing was outstanding, or the PSN was never sent or was
	// already completed (repeated ACKs among them).
	DropUnexpectedResp uint64 `rdma:"drop_unexpected_resp"`
	// DropBadTransport counts packets of another transport than the
	// QP's (a UC or UD opcode to an RC QP, say).
	DropBadTransport uint64 `rdma:"drop_bad_transport"`
	// LostCompletions counts the QP's completions its CQ had no room for.
	LostCompletions uint64 `rdma:"lost_completions"`

	// Congestion control (qp/cc.go), with mlx5's names where it has one.
	// NPECNMarked counts CE-marked packets received; NPCNPSent the CNPs
	// sent for them (at most one per MinTimeBetweenCNPs).
	NPECNMarked uint64 `rdma:"np_ecn_marked_roce_packets"`
	NPCNPSent   uint64 `rdma:"np_cnp_sent"`
	// RPCNPHandled counts CNPs that reached DCQCN's reaction point;
	// RPCNPIgnored those that came to a QP whose mode runs no DCQCN.
	RPCNPHandled uint64 `rdma:"rp_cnp_handled"`
	RPCNPIgnored uint64 `rdma:"rp_cnp_ignored"`
	// CCPaced counts the times the pacer held a packet back.
	CCPaced uint64 `rdma:"cc_paced"`
	// CCWindowCuts counts the delay window's cuts (a sample over target,
	// a loss with a queue behind it, a timeout); CCLossesKept the
	// losses that cut nothing, as no queue was behind them.
	CCWindowCuts uint64 `rdma:"cc_window_cuts"`
	CCLossesKept uint64 `rdma:"cc_losses_kept"`
	// CCMode* are 1 for the mode the QP runs and 0 for the others (set
	// as it moves to RTR); summed in Device.Stats, the live QPs running
	// each.
	CCModeAuto  uint64 `rdma:"cc_mode_auto"`
	CCModeOff   uint64 `rdma:"cc_mode_off"`
	CCModeDCQCN uint64 `rdma:"cc_mode_dcqcn"`
	CCModeDelay uint64 `rdma:"cc_mode_delay"`
}

// clearModes zeroes the mode gauges (CCMode*).
func (c *Counters) clearModes() {
	c.CCModeAuto, c.CCModeOff, c.CCModeDCQCN, c.CCModeDelay = 0, 0, 0, 0
}

// Add adds o to c; a nil o adds nothing, and a nil c takes nothing.
func (c *Counters) Add(o *Counters) {
	if c == nil || o == nil {
		return
	}
	cv, ov := reflect.ValueOf(c).Elem(), reflect.ValueOf(o).Elem()
	for i := range cv.NumField() {
		f := cv.Field(i)
		f.SetUint(f.Uint() + ov.Field(i).Uint())
	}
}

// Each calls f with each counter's rdma name and value, in field order;
// a nil c has none.
func (c *Counters) Each(f func(name string, v uint64)) {
	if c == nil || f == nil {
		return
	}
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range v.NumField() {
		f(t.Field(i).Tag.Get("rdma"), v.Field(i).Uint())
	}
}

// String lists the non-zero counters as name=value.
func (c *Counters) String() string {
	if c == nil {
		return "<nil>"
	}
	var b strings.Builder
	c.Each(func(name string, v uint64) {
		if v != 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(name)
			b.WriteByte('=')
			b.WriteString(uitoa(v))
		}
	})
	return b.String()
}

func uitoa(v uint64) string {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(buf[i:])
		}
	}
}

type dropReason uint8

const (
	dropMalformed dropReason = iota
	dropTVer
	dropNoQP
	dropNoMcastGroup
	numDropReasons
)

// devCounters are the device's own counters, for packets that reach no QP.
type devCounters struct {
	drops         [numDropReasons]atomic.Uint64
	sendErr       atomic.Uint64
	eventsDropped atomic.Uint64
}

func (c *devCounters) drop(r dropReason) { c.drops[r].Add(1) }

// Stats are a device's counters: the sum over its queue pairs, alive and
// destroyed, and the drops before any QP.
type Stats struct {
	Counters
	// DropMalformed counts packets that did not parse as RoCE.
	DropMalformed uint64
	// DropTVer counts packets with a transport version other than 0.
	DropTVer uint64
	// DropNoQP counts packets for a QP the device does not have.
	DropNoQP uint64
	// DropNoMcastGroup counts datagrams to the multicast QPN whose
	// destination is no group a QP of the device is attached to.
	DropNoMcastGroup uint64
	// SendErr counts batches the transport failed to send.
	SendErr uint64
	// EventsDropped counts asynchronous events lost to a full channel.
	EventsDropped uint64
}

// Stats returns the device's counters.
func (d *Device) Stats() Stats {
	var s Stats
	if !d.ok() {
		return s
	}
	d.qpMu.Lock()
	s.Counters = d.retired
	var qps []*QP
	d.qps.each(func(q *QP) { qps = append(qps, q) })
	d.qpMu.Unlock()
	for _, q := range qps {
		c := q.Counters()
		s.Counters.Add(&c)
	}
	s.DropMalformed = d.ctr.drops[dropMalformed].Load()
	s.DropTVer = d.ctr.drops[dropTVer].Load()
	s.DropNoQP = d.ctr.drops[dropNoQP].Load()
	s.DropNoMcastGroup = d.ctr.drops[dropNoMcastGroup].Load()
	s.SendErr = d.ctr.sendErr.Load()
	s.EventsDropped = d.ctr.eventsDropped.Load()
	return s
}

// countNAKSent counts a NAK the responder sends.
func (c *Counters) countNAKSent(s bth.Syndrome) {
	switch s.Kind() {
	case bth.KindRNRNAK:
		c.SendRNRErr++
	case bth.KindNAK:
		switch s.NAKCode() {
		case bth.NAKPSNSequenceError:
			c.SendSeqErr++
		case bth.NAKInvalidRequest:
			c.SentInvReqNAK++
		case bth.NAKRemoteAccessError:
			c.SentRemAccessNAK++
		default:
			c.SentRemOpNAK++
		}
	}
}
