package diagram_test

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/goroce/goroce/internal/diagram"
)

// A capture drawn in the text form: rping's rdma_cm handshake on QP 1,
// then its SEND, READ and WRITE exchange.
func ExampleFromCapture() {
	f, err := os.Open("../../testdata/captures/rxe_rping_rdmacm.pcap")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	d, err := diagram.FromCapture(f)
	if err != nil {
		log.Fatal(err)
	}
	d.Title = "rping"
	var b bytes.Buffer
	if err := d.WriteText(&b); err != nil {
		log.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	fmt.Println(strings.Join(lines[:16], "\n"))
	// Output:
	// title rping
	//
	// autonumber
	//
	// participant "198.18.0.12 QP 1" as H1Q1
	// participant "198.18.0.12 QP 30" as H1Q30
	// participant "198.18.0.11 QP 30" as H2Q30
	// participant "198.18.0.11 QP 1" as H2Q1
	//
	// H1Q1->H2Q1: CM REQ (frame 1)
	// note over H1Q1, H2Q1: CM REQ: 198.18.0.12 QP 30 asks 198.18.0.11 to connect to port 7174; 198.18.0.11 is to send from PSN 4956138
	// H2Q1-->H1Q1: CM REP (frame 2)
	// note over H1Q1, H2Q1: CM REP: 198.18.0.11 QP 30 accepts 198.18.0.12 QP 30; 198.18.0.12 is to send from PSN 7345254
	// H1Q1->H2Q1: CM RTU (frame 3)
	// note over H1Q1, H2Q1: CM RTU: 198.18.0.12 QP 30 and 198.18.0.11 QP 30 are connected
	// H1Q30->H2Q30: SEND ONLY, PSN 7345254, 16 B (frame 4)
}

// How a tool takes --diagram and --diagram=html.
func ExampleFormat() {
	for _, args := range [][]string{{"--diagram", "x.pcap"}, {"--diagram=html", "x.pcap"}, {"x.pcap"}} {
		fs := flag.NewFlagSet("decode", flag.ContinueOnError)
		var form diagram.Format
		fs.Var(&form, "diagram", "draw the capture as a sequence diagram: text (the default) or html")
		if err := fs.Parse(args); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%q %v\n", form, fs.Args())
	}
	// Output:
	// "text" [x.pcap]
	// "html" [x.pcap]
	// "" [x.pcap]
}
