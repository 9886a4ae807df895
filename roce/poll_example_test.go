package roce_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// Wait for the completion of a request with PollOne, and turn a failed
// one into an error: an RDMA WRITE with a wrong rkey fails with
// REM_ACCESS_ERR, which errors.Is finds.
func ExamplePollOne() {
	client, server := pair()
	defer client.close()
	defer server.close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	write := func(rkey uint32) error {
		wr := verbs.SendWR{ID: 7, Opcode: verbs.OpWrite, Flags: verbs.Signaled,
			SGL:        []verbs.SGE{{Addr: client.mr.Addr(), Length: 16, LKey: client.mr.LKey()}},
			RemoteAddr: server.mr.Addr(), RKey: rkey}
		if err := client.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			return err
		}
		_, err := roce.PollOne(ctx, client.cq)
		return err
	}
	if err := write(server.mr.RKey()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("first write done")
	err := write(server.mr.RKey() ^ 0xFF)
	fmt.Println(errors.Is(err, verbs.RemAccessErr))
	fmt.Println(err)
	// Output:
	// first write done
	// true
	// verbs: work request 7 on QP 17 completed with REM_ACCESS_ERR (opcode RDMA_WRITE)
}
