package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/congestion"
)

// TestToolDevice parses the tool flags as rping, rstream and rcopy
// declare them and checks each bad value's usage error.
func TestToolDevice(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{nil, ""},
		{[]string{"--transport", "afpacket", "--dev", "eth0", "--pcap", "x.pcap", "--roce-port", "5000", "--mtu", "1024"}, ""},
		{[]string{"--transport", "tcp"}, `--transport "tcp": want udp or afpacket`},
		{[]string{"--roce-port", "0"}, "--roce-port 0: want 1 to 65535"},
		{[]string{"--roce-port", "65536"}, "--roce-port 65536"},
		{[]string{"--mtu", "1500"}, "--mtu 1500: want 256, 512, 1024, 2048 or 4096"},
	} {
		var d ToolDevice
		fs := NewFlagSet(Getopt)
		d.Register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		err := d.Check()
		var ue *UsageError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.want != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
	d := ToolDevice{Transport: "afpacket", Dev: "eth0", Pcap: "x.pcap", Port: 5000}
	if f := d.Flags("198.18.0.1"); f != (DeviceFlags{Transport: "afpacket", Bind: "198.18.0.1", Dev: "eth0", Port: 5000, Pcap: "x.pcap"}) {
		t.Errorf("Flags: %+v", f)
	}
}

// TestCongestionFlags checks --cc and --line-rate: each mode by name,
// rates with their suffixes, and a usage error for anything else.
func TestCongestionFlags(t *testing.T) {
	for _, c := range []struct {
		cc, rate string
		mode     congestion.Mode
		bps      float64
	}{
		{"", "", congestion.DCQCN, 0}, {"off", "", congestion.Off, 0}, {"dcqcn", "10g", congestion.DCQCN, 10e9},
		{"delay", "1.5G", congestion.Delay, 1.5e9}, {"auto", "100m", congestion.Auto, 100e6}, {"auto", "2e9", congestion.Auto, 2e9},
	} {
		d := DeviceFlags{Transport: "udp", Port: 4791, CC: c.cc, LineRate: c.rate}
		cfg, err := d.Config("127.0.0.1")
		if err != nil || cfg.Congestion.Mode != c.mode || cfg.Congestion.LineRate != c.bps {
			t.Errorf("--cc %q --line-rate %q: %+v, %v", c.cc, c.rate, cfg, err)
		}
	}
	for _, c := range []struct{ cc, rate, want string }{
		{"reno", "", "--cc must be auto, dcqcn, delay or off"}, {"", "fast", "--line-rate"}, {"", "-1g", "--line-rate"},
		{"", "0", "--line-rate"},
	} {
		d := DeviceFlags{Transport: "udp", Port: 4791, CC: c.cc, LineRate: c.rate}
		var ue *UsageError
		if _, err := d.Config(""); !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--cc %q --line-rate %q: %v, want a usage error saying %q", c.cc, c.rate, err, c.want)
		}
	}
	d := DeviceFlags{Transport: "udp", Port: 4791, CCTarget: 300 * time.Microsecond}
	if cfg, err := d.Config(""); err != nil || cfg.Congestion.Delay.Target != 300*time.Microsecond {
		t.Errorf("--cc-target 300µs: %+v, %v", cfg, err)
	}
	d.CCTarget = -1
	var ue *UsageError
	if _, err := d.Config(""); !errors.As(err, &ue) {
		t.Errorf("--cc-target -1ns: %v, want a usage error", err)
	}
	if _, err := ParseRate(""); err == nil {
		t.Error("an empty rate parsed")
	}
}
