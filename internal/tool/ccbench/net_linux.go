//go:build linux

package ccbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The testbed: two network namespaces joined by a veth pair. The senders
// live in ccbA, each on an address of its own on ccva; the receiver in
// ccbB on ccvb. The bottleneck is ccva's egress: a tbf qdisc at the
// rate, with the buffer as its limit. nftables marks CE (ECN-capable
// packets past a rate, at ccva's egress, before the qdisc) and drops at
// random (at ccvb's ingress, where the packets are single: segmentation
// offloads are off on both ends, or a dropped GSO datagram would be a
// burst). Addresses are 198.18.30.0/24 and 2001:db8:30::/64; nothing
// routes out.
const (
	nsA, nsB   = "ccbA", "ccbB"
	devA, devB = "ccva", "ccvb"
)

// netCfg is one run's bottleneck.
type netCfg struct {
	rate   string  // tbf rate, "1gbit"
	buffer int     // tbf limit, bytes
	mark   float64 // mark CE past this fraction of the rate; 0: no marking
	frame  int     // the marked stack's packet size at the egress hook, bytes
	loss   float64 // random loss, 0 to 1
	v6     bool
	tcpECN bool // the namespaces' TCP negotiates ECN
}

// addrA returns sender i's address; addrB the receiver's.
func addrA(i int, v6 bool) netip.Addr {
	if v6 {
		return netip.MustParseAddr("2001:db8:30::" + strconv.Itoa(1+i))
	}
	return netip.AddrFrom4([4]byte{198, 18, 30, byte(1 + i)})
}

func addrB(v6 bool) netip.Addr {
	if v6 {
		return netip.MustParseAddr("2001:db8:30::100")
	}
	return netip.MustParseAddr("198.18.30.100")
}

// run runs a command, and fails with its output.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func runIn(ns, name string, args ...string) error {
	return run("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// checkHost reports what the testbed needs and the host lacks.
func checkHost() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("ccbench needs root: it makes network namespaces, a tbf qdisc and nftables rules")
	}
	for _, c := range []string{"ip", "tc", "nft", "ethtool"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("ccbench needs %s: apt-get install iproute2 nftables ethtool", c)
		}
	}
	return nil
}

// setup makes the testbed with senders addresses on ccva.
func setup(c netCfg, senders int) error {
	teardown()
	steps := [][]string{
		{"ip", "netns", "add", nsA}, {"ip", "netns", "add", nsB},
		{"ip", "link", "add", "name", devA, "netns", nsA, "type", "veth", "peer", "name", devB, "netns", nsB},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return err
		}
	}
	pfx := "/24"
	if c.v6 {
		pfx = "/64"
	}
	for i := range senders {
		if err := runIn(nsA, "ip", "addr", "add", addrA(i, c.v6).String()+pfx, "dev", devA, "nodad"); err != nil {
			return err
		}
	}
	if err := runIn(nsB, "ip", "addr", "add", addrB(c.v6).String()+pfx, "dev", devB, "nodad"); err != nil {
		return err
	}
	for _, x := range [][2]string{{nsA, devA}, {nsB, devB}} {
		for _, s := range [][]string{
			{"ip", "link", "set", "lo", "up"}, {"ip", "link", "set", x[1], "up"},
			{"ethtool", "-K", x[1], "tso", "off", "gso", "off", "tx-udp-segmentation", "off"},
			// Steer each flow's packets to one CPU's backlog (RPS): a
			// veth hands what it receives to the backlog of the CPU
			// that sends, and the tbf sends from whichever CPU runs it
			// (the sender's, or its watchdog's), so without RPS one
			// flow's packets reorder between two CPUs' backlogs, which
			// go-back-N takes for loss (with 2 senders, 13-17 % of
			// goroce's packets were sent again with nothing dropped).
			{"sh", "-c", "echo " + cpuMask() + " > /sys/class/net/" + x[1] + "/queues/rx-0/rps_cpus"},
		} {
			if err := runIn(x[0], s[0], s[1:]...); err != nil {
				return err
			}
		}
		ecn := "0"
		if c.tcpECN {
			ecn = "1"
		}
		if err := runIn(x[0], "sysctl", "-q", "-w", "net.ipv4.tcp_ecn="+ecn); err != nil {
			return err
		}
	}
	if err := runIn(nsA, "tc", "qdisc", "add", "dev", devA, "root", "tbf", "rate", c.rate, "burst", "64kb",
		"limit", strconv.Itoa(c.buffer)); err != nil {
		return err
	}
	var rules strings.Builder
	if c.mark > 0 {
		bps, err := parseRate(c.rate)
		if err != nil {
			return err
		}
		fam := "ip"
		if c.v6 {
			fam = "ip6"
		}
		fmt.Fprintf(&rules, "table netdev ccbmark {\n chain egress {\n  type filter hook egress device %q priority 0; policy accept;\n", devA)
		// Mark ECN-capable packets past the fraction of the rate: a
		// phantom queue (the host's kernel has no RED with ECN). It
		// counts packets, as nftables' byte limits keep a second's
		// worth of tokens (nft_limit.c: the bucket is the unit plus the
		// burst), which marks nothing on a link a few percent
		// oversubscribed; the goroce devices send without GSO, so that
		// the packets the rule sees are single.
		pps, burst := markLimit(bps*c.mark, c.frame)
		for _, ect := range []string{"ect0", "ect1"} {
			fmt.Fprintf(&rules, "  %s ecn %s limit rate over %d/second burst %d packets counter %s ecn set ce\n",
				fam, ect, pps, burst, fam)
		}
		fmt.Fprintf(&rules, " }\n}\n")
		if err := nft(nsA, rules.String()); err != nil {
			return err
		}
	}
	if c.loss > 0 {
		// Per mille of every packet to the receiver, RoCE and TCP alike.
		r := fmt.Sprintf("table netdev ccbloss {\n chain ingress {\n  type filter hook ingress device %q priority 0; policy accept;\n"+
			"  numgen random mod 100000 < %d counter drop\n }\n}\n", devB, int(c.loss*100000+0.5))
		if err := nft(nsB, r); err != nil {
			return err
		}
	}
	return nil
}

func nft(ns, rules string) error {
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %v: %s\n%s", err, bytes.TrimSpace(out), rules)
	}
	return nil
}

// teardown removes the testbed (the veth pair goes with its namespaces).
func teardown() {
	exec.Command("ip", "netns", "del", nsA).Run()
	exec.Command("ip", "netns", "del", nsB).Run()
}

// backlog returns the bytes queued at the bottleneck.
func backlog() (int, error) {
	out, err := exec.Command("ip", "netns", "exec", nsA, "tc", "-s", "-j", "qdisc", "show", "dev", devA).Output()
	if err != nil {
		return 0, err
	}
	var qs []struct {
		Kind    string `json:"kind"`
		Backlog int    `json:"backlog"`
		Drops   int    `json:"drops"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		return 0, err
	}
	for _, q := range qs {
		if q.Kind == "tbf" {
			return q.Backlog, nil
		}
	}
	return 0, fmt.Errorf("no tbf on %s", devA)
}

// qdiscDrops returns the packets the bottleneck dropped.
func qdiscDrops() int {
	out, err := exec.Command("ip", "netns", "exec", nsA, "tc", "-s", "-j", "qdisc", "show", "dev", devA).Output()
	if err != nil {
		return -1
	}
	var qs []struct {
		Kind  string `json:"kind"`
		Drops int    `json:"drops"`
	}
	if json.Unmarshal(out, &qs) != nil {
		return -1
	}
	for _, q := range qs {
		if q.Kind == "tbf" {
			return q.Drops
		}
	}
	return -1
}

// cpuMask is the hexadecimal mask of the CPUs the process may run on,
// as rps_cpus takes it.
func cpuMask() string {
	n := min(runtime.NumCPU(), 32)
	return strconv.FormatUint(1<<n-1, 16)
}

// marked returns how many packets the marking rules marked CE, -1 when
// the run marks nothing or the count cannot be read.
func marked() int {
	out, err := exec.Command("ip", "netns", "exec", nsA, "nft", "list", "table", "netdev", "ccbmark").Output()
	if err != nil {
		return -1
	}
	n := 0
	for _, m := range markedCount.FindAllSubmatch(out, -1) {
		v, _ := strconv.Atoi(string(m[1]))
		n += v
	}
	return n
}

var markedCount = regexp.MustCompile(`counter packets (\d+) bytes`)

// inNS runs f on a thread of its own switched into namespace ns: sockets
// f makes stay there. The thread ends with f (it stays locked), so no
// other goroutine runs in the namespace.
func inNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("namespace %s: %w", ns, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// setCC sets a TCP socket's congestion control.
func setCC(fd uintptr, name string) error {
	return unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
}

// tcpRetrans returns a TCP socket's bytes sent and sent again.
func tcpRetrans(fd uintptr) (sent, retrans uint64) {
	info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, 0
	}
	return info.Bytes_sent, info.Bytes_retrans
}

// markBurst is the phantom queue's depth before it marks: an eighth of
// the buffer, as DCQCN's K_min sits well inside a switch's buffer.
const markBurst = 32 << 10

// markLimit returns the packets per second past which the marking rule
// marks, for a rate of bps bits per second and packets of frame bytes,
// and its burst in packets.
func markLimit(bps float64, frame int) (pps, burst int) {
	return int(bps / 8 / float64(frame)), max(markBurst/frame, 1)
}
