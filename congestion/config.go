package congestion

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Mode is the congestion control a queue pair runs.
type Mode uint8

const (
	// DCQCN is DCQCN (Zhu et al., SIGCOMM 2015) as a ConnectX NIC runs
	// it: data packets go out ECN-capable (ECT(0)), the receiver answers
	// CE marks with CNPs, and the sender paces at the rate DCQCN computes
	// from the CNPs it gets; the window is the engine's own (halved by
	// every retry, grown by an eighth per window acknowledged, as Off).
	// It costs nothing where nothing marks (no CNP, no pacing), and next
	// to a peer that ignores ECN (kernel rxe) it never engages. It is the
	// zero Mode, the default.
	DCQCN Mode = iota
	// Auto runs both signals a path may give: DCQCN where the path marks
	// ECN, and the delay-based window of Delay everywhere, which holds
	// the queue near a target where nothing marks and takes a loss with
	// little delay for noise, not congestion. On a host whose RTTs are
	// noisy (a busy one, or the loopback, where batching alone takes
	// 100 µs) raise Delay.Target above the noise, or the window holds
	// back what the path could carry.
	Auto
	// Off is no congestion control: the window alone, halved by every
	// retry, grown by an eighth per window acknowledged (goroce before
	// congestion control); no ECN, no CNPs, no pacing.
	Off
	// Delay is the delay-based window alone, from the RTTs ACKs give
	// (after Swift, Kumar et al., SIGCOMM 2020), for paths where nothing
	// marks ECN; packets go out not ECN-capable.
	Delay
	numModes
)

var modeNames = [...]string{"dcqcn", "auto", "off", "delay"}

// String returns the mode's name: dcqcn, auto, off or delay.
func (m Mode) String() string {
	if m < numModes {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode returns the mode named s (auto, off, dcqcn, delay).
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if s == n {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("%w: mode %q: want dcqcn, auto, off or delay", ErrInvalid, s)
}

// ECN reports whether the mode's data packets go out ECN-capable and its
// receivers answer CE marks with CNPs.
func (m Mode) ECN() bool { return m == Auto || m == DCQCN }

// Paced reports whether the mode paces at DCQCN's rate.
func (m Mode) Paced() bool { return m == Auto || m == DCQCN }

// Windowed reports whether the mode's window follows the delay.
func (m Mode) Windowed() bool { return m == Auto || m == Delay }

// ErrInvalid means a setting is out of its range.
var ErrInvalid = errors.New("congestion: invalid setting")

// Config is the congestion control of a device's queue pairs. The zero
// Config (and each zero field) means the defaults; negative durations and
// counts are errors. It is plain data.
type Config struct {
	// Mode is the congestion control (DCQCN by default).
	Mode Mode
	// LineRate is the link's rate in bits per second, as a NIC's port
	// speed: the ceiling of DCQCN's rate, and in the paced modes (Auto,
	// DCQCN) a rate no QP sends faster than, DCQCN active or not. 0
	// means unknown: DCQCN's rate recovers up to 400 Gbit/s, where its
	// pacing ends, and nothing else paces.
	LineRate float64
	// DCQCN holds the reaction and notification point's settings.
	DCQCN DCQCNConfig
	// Delay holds the delay-based window's.
	Delay DelayConfig
}

// DCQCNConfig is DCQCN's settings, named after the rp_ and np_ settings
// NVIDIA documents for ConnectX-4 and later (mlxconfig's RPG_*, DCE_TCP_*
// names; /sys/class/net/IF/ecn/roce_rp and roce_np), with their firmware
// defaults unless the field says otherwise. Zero fields mean the
// defaults; rates are in bits per second.
type DCQCNConfig struct {
	// TimeReset is the rate-increase timer (rpg_time_reset, 300 µs).
	TimeReset time.Duration
	// ByteReset is the rate-increase byte counter (rpg_byte_reset,
	// 32,767 bytes).
	ByteReset int
	// Threshold is how many timer or byte-counter events each recovery
	// stage lasts: fast recovery, then additive, then hyper increase
	// (rpg_threshold, 1; the paper's F).
	Threshold int
	// AIRate and HAIRate are the additive and hyper increase steps of
	// the target rate (rpg_ai_rate, 5 Mbit/s; rpg_hai_rate, 50 Mbit/s).
	AIRate, HAIRate float64
	// MinRate is the lowest rate a cut reaches (rpg_min_rate, 1 Mbit/s).
	MinRate float64
	// MaxRate caps the rate (rpg_max_rate; 0, the default, is the line
	// rate, Config.LineRate).
	MaxRate float64
	// RateOnFirstCNP is the rate, current and target, a flow starts from
	// at its first CNP before the cut (rate_to_set_on_first_cnp). 0, the
	// default, means the line rate on a NIC; goroce, which knows no line
	// rate, takes what the QP sent over the last millisecond.
	RateOnFirstCNP float64
	// MinDecFac bounds one cut: the new rate is at least this percentage
	// of the old (rpg_min_dec_fac, 50).
	MinDecFac int
	// GD is the base-2 logarithm, plus 10, of the divisor of alpha in a
	// cut: the rate is multiplied by 1 - alpha/2^(GD-10) (rpg_gd, 11:
	// 1 - alpha/2, the paper's cut). 10 or 11.
	GD int
	// G is alpha's gain in 1024ths: alpha becomes G/1024·alpha, plus
	// (1024-G)/1024 when a CNP came in the period (dce_tcp_g, 1019).
	G int
	// AlphaPeriod is alpha's update period (dce_tcp_rtt). ConnectX's
	// default is 1 µs, for a notification point that may send a CNP
	// every 2 to 4 µs; DCQCN needs the period longer than the CNP
	// interval (alpha would fall between any two CNPs otherwise), and
	// goroce's receivers send one per MinTimeBetweenCNPs (50 µs), so the
	// default is the paper's K, 55 µs.
	AlphaPeriod time.Duration
	// ReduceMonitorPeriod is the least time between two cuts
	// (rate_reduce_monitor_period, 4 µs).
	ReduceMonitorPeriod time.Duration
	// InitialAlpha is alpha at a flow's first CNP, in 1024ths
	// (initial_alpha_value, 1023).
	InitialAlpha int
	// ClampTargetRate makes every cut set the target rate to the
	// current rate (clamp_tgt_rate, off); ClampAfterTimeInc does so only
	// when a timer increase came since the last cut
	// (clamp_tgt_rate_after_time_inc, on). Neither: the target stays.
	// Set NoClampAfterTimeInc to turn the second off.
	ClampTargetRate, NoClampAfterTimeInc bool
	// IncreaseUnused lets the rate increase while the flow sends below
	// it, as in DCQCN's model, where every flow always sends at its rate.
	// By default an increase event raises the rate only if the pacer
	// held the flow back since the last one (ReactionPoint.Held): a flow
	// that something else holds to less (its window, its socket, the
	// program) would otherwise climb, by hyper increase, to rates it
	// never sends at, and the CNPs that come once it does cut from there
	// and hold nothing (on the netns testbed, rates of 50 Gbit/s on a
	// 1 Gbit/s link). This is TCP's congestion window validation (RFC
	// 7661) for a rate; no NIC setting names it.
	IncreaseUnused bool
	// MinTimeBetweenCNPs is the least time between two CNPs a receiver
	// sends for one QP (min_time_between_cnps). ConnectX's firmware
	// default is 2 to 4 µs, one a hardware receive path can keep; a
	// software one handles packets in batches, and the default is the
	// DCQCN paper's N, 50 µs.
	MinTimeBetweenCNPs time.Duration
	// CNPDSCP is the DSCP of the CNPs a receiver sends (cnp_dscp, 48);
	// -1 means 0.
	CNPDSCP int
}

// DelayConfig is the delay-based window's settings. Zero fields mean the
// defaults.
type DelayConfig struct {
	// Target is the queueing delay the window aims at: the window grows
	// while the RTT is below the smallest RTT seen plus Target, and
	// shrinks above it (default 100 µs).
	Target time.Duration
	// ProbeInterval is how long the smallest RTT a window has seen
	// stands before the window probes it again: MinWindow for two round
	// trips, so that its own queue drains (BBR's ProbeRTT). A flow that
	// joined a queue others held takes it for the path's delay until
	// then. Default 25 ms: on the switch model 8 flows that started together
	// share a port within 0.97 of fair over 100 ms windows (0.88 at 100 ms),
	// and one flow alone loses 1 % of its goodput to the probes.
	ProbeInterval time.Duration
	// FSRange is the most the target grows for a flow with a small
	// window (Swift's flow scaling, fs_range): MinWindow packets get
	// Target + FSRange, 100 packets or more Target alone (default Target;
	// negative: none).
	FSRange time.Duration
	// AI is the additive increase, in packets per round trip (default
	// 1, Swift's ai).
	AI float64
	// Beta scales a cut by how far the delay is over target:
	// 1 - Beta·(delay-target)/delay (default 0.8, Swift's β).
	Beta float64
	// MaxMDF bounds one cut: the window keeps at least 1 - MaxMDF of
	// itself (default 0.5, Swift's max_mdf).
	MaxMDF float64
	// MinWindow and MaxWindow bound the window, in packets (defaults 2;
	// 0 for MaxWindow means the engine's bound on packets in flight).
	MinWindow, MaxWindow int
	// InitialWindow is a flow's first window, in packets (default 10, as
	// TCP's); it
	// doubles each round trip (slow start) until the delay passes the
	// target or a packet is lost.
	InitialWindow int
}

// Defaults of DCQCNConfig: ConnectX's firmware defaults, but AlphaPeriod
// and MinTimeBetweenCNPs (see their fields).
const (
	DefaultTimeReset           = 300 * time.Microsecond
	DefaultByteReset           = 32767
	DefaultThreshold           = 1
	DefaultAIRate              = 5e6
	DefaultHAIRate             = 50e6
	DefaultMinRate             = 1e6
	DefaultMinDecFac           = 50
	DefaultGD                  = 11
	DefaultG                   = 1019
	DefaultAlphaPeriod         = 55 * time.Microsecond
	DefaultReduceMonitorPeriod = 4 * time.Microsecond
	DefaultInitialAlpha        = 1023
	DefaultMinTimeBetweenCNPs  = 50 * time.Microsecond
	DefaultCNPDSCP             = 48
	// DefaultMaxRate is the rate ceiling when neither MaxRate nor
	// LineRate is set: the fastest Ethernet.
	DefaultMaxRate = 400e9
)

// Defaults of DelayConfig.
const (
	DefaultTarget        = 100 * time.Microsecond
	DefaultProbeInterval = 25 * time.Millisecond
	DefaultAI            = 1
	DefaultBeta          = 0.8
	DefaultMaxMDF        = 0.5
	DefaultMinWindow     = 2
	DefaultInitialWindow = 10
)

// Resolved returns c with every default filled in, or an error naming the
// first setting out of range and what it takes. A nil c is the zero
// Config.
func (c *Config) Resolved() (Config, error) {
	var r Config
	if c != nil {
		r = *c
	}
	if r.Mode >= numModes {
		return r, fmt.Errorf("%w: Mode %d: want DCQCN, Auto, Off or Delay", ErrInvalid, r.Mode)
	}
	if err := positive("LineRate", r.LineRate, "bits per second, 0 for unknown"); err != nil {
		return r, err
	}
	if err := r.DCQCN.resolve(); err != nil {
		return r, err
	}
	if err := r.Delay.resolve(); err != nil {
		return r, err
	}
	return r, nil
}

func (d *DCQCNConfig) resolve() error {
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"DCQCN.TimeReset", &d.TimeReset, DefaultTimeReset}, {"DCQCN.AlphaPeriod", &d.AlphaPeriod, DefaultAlphaPeriod},
		{"DCQCN.ReduceMonitorPeriod", &d.ReduceMonitorPeriod, DefaultReduceMonitorPeriod},
		{"DCQCN.MinTimeBetweenCNPs", &d.MinTimeBetweenCNPs, DefaultMinTimeBetweenCNPs},
	} {
		if *f.v < 0 {
			return fmt.Errorf("%w: %s %v: want a positive duration, or 0 for the default %v", ErrInvalid, f.name, *f.v, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name     string
		v        *float64
		def      float64
		canBeOff bool
	}{
		{"DCQCN.AIRate", &d.AIRate, DefaultAIRate, false}, {"DCQCN.HAIRate", &d.HAIRate, DefaultHAIRate, false},
		{"DCQCN.MinRate", &d.MinRate, DefaultMinRate, false}, {"DCQCN.MaxRate", &d.MaxRate, 0, true},
		{"DCQCN.RateOnFirstCNP", &d.RateOnFirstCNP, 0, true},
	} {
		if err := positive(f.name, *f.v, "bits per second, 0 for the default"); err != nil {
			return err
		}
		if *f.v == 0 && !f.canBeOff {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name     string
		v        *int
		def, max int
		unit     string
	}{
		{"DCQCN.ByteReset", &d.ByteReset, DefaultByteReset, 1 << 30, "bytes"},
		{"DCQCN.Threshold", &d.Threshold, DefaultThreshold, 1 << 20, "events"},
		{"DCQCN.MinDecFac", &d.MinDecFac, DefaultMinDecFac, 100, "percent"},
		{"DCQCN.G", &d.G, DefaultG, 1023, "1024ths"},
		{"DCQCN.InitialAlpha", &d.InitialAlpha, DefaultInitialAlpha, 1023, "1024ths"},
	} {
		if *f.v < 0 || *f.v > f.max {
			return fmt.Errorf("%w: %s %d: want 1 to %d %s, or 0 for the default %d", ErrInvalid, f.name, *f.v, f.max, f.unit, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	switch {
	case d.GD == 0:
		d.GD = DefaultGD
	case d.GD != 10 && d.GD != 11:
		return fmt.Errorf("%w: DCQCN.GD %d: want 10 (cut by alpha) or 11 (by alpha/2), or 0 for the default 11", ErrInvalid, d.GD)
	}
	switch {
	case d.CNPDSCP == 0:
		d.CNPDSCP = DefaultCNPDSCP
	case d.CNPDSCP == -1:
	case d.CNPDSCP < 0 || d.CNPDSCP > 63:
		return fmt.Errorf("%w: DCQCN.CNPDSCP %d: want 1 to 63, -1 for 0, or 0 for the default 48", ErrInvalid, d.CNPDSCP)
	}
	return nil
}

func (d *DelayConfig) resolve() error {
	switch {
	case d.Target < 0:
		return fmt.Errorf("%w: Delay.Target %v: want a positive duration, or 0 for the default %v", ErrInvalid, d.Target, DefaultTarget)
	case d.Target == 0:
		d.Target = DefaultTarget
	}
	switch {
	case d.ProbeInterval < 0:
		return fmt.Errorf("%w: Delay.ProbeInterval %v: want a positive duration, or 0 for the default %v", ErrInvalid,
			d.ProbeInterval, DefaultProbeInterval)
	case d.ProbeInterval == 0:
		d.ProbeInterval = DefaultProbeInterval
	}
	switch {
	case d.FSRange == 0:
		d.FSRange = d.Target
	case d.FSRange < 0:
		d.FSRange = 0
	}
	for _, f := range []struct {
		name     string
		v        *float64
		def, max float64
	}{
		{"Delay.AI", &d.AI, DefaultAI, 1 << 20}, {"Delay.Beta", &d.Beta, DefaultBeta, 1}, {"Delay.MaxMDF", &d.MaxMDF, DefaultMaxMDF, 1},
	} {
		if *f.v < 0 || *f.v > f.max || math.IsNaN(*f.v) {
			return fmt.Errorf("%w: %s %v: want more than 0, at most %v, or 0 for the default %v", ErrInvalid, f.name, *f.v, f.max, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"Delay.MinWindow", &d.MinWindow, DefaultMinWindow}, {"Delay.MaxWindow", &d.MaxWindow, 0},
		{"Delay.InitialWindow", &d.InitialWindow, DefaultInitialWindow},
	} {
		if *f.v < 0 || *f.v > 1<<23 {
			return fmt.Errorf("%w: %s %d: want 1 to %d packets, or 0 for the default", ErrInvalid, f.name, *f.v, 1<<23)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if d.MaxWindow > 0 && d.MinWindow > d.MaxWindow {
		return fmt.Errorf("%w: Delay.MinWindow %d over Delay.MaxWindow %d", ErrInvalid, d.MinWindow, d.MaxWindow)
	}
	return nil
}

// positive checks a rate: 0 or more, and a number.
func positive(name string, v float64, want string) error {
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%w: %s %v: want %s", ErrInvalid, name, v, want)
	}
	return nil
}
