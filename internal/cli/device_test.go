package cli

import (
	"errors"
	"strings"
	"testing"
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
