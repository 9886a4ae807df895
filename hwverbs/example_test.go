package hwverbs_test

import (
	"fmt"
	"log"
	"net/netip"

	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// Open the first RDMA device, or fall back to goroce's software device
// when this build or host has none: the rest of the program is the same
// for both.
func ExampleOpen() {
	var dev verbs.Device
	hw, err := hwverbs.Open("", nil)
	if err == nil {
		dev = hw
	} else {
		log.Printf("no hardware: %v", err)
		if dev, err = roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1")}}); err != nil {
			log.Fatal(err)
		}
	}
	defer dev.Close()
	gid, _ := dev.GID(0)
	fmt.Println(dev.Name(), netip.AddrFrom16(gid).Unmap(), dev.ActiveMTU())
}

// Register memory that the NIC may use: from Alloc, outside the Go heap,
// or any Go buffer, which RegMR pins until Dereg.
func ExampleAlloc() {
	dev, err := hwverbs.Open("", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	buf, err := hwverbs.Alloc(1 << 20)
	if err != nil {
		log.Fatal(err)
	}
	defer hwverbs.Free(buf)
	mr, err := pd.RegMR(buf, verbs.LocalWrite|verbs.RemoteRead|verbs.RemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Dereg()
	fmt.Printf("addr %#x rkey %#x\n", mr.Addr(), mr.RKey())
}
