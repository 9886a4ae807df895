package scenario

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/verbs"
)

// rdma-lib's modes, on the second QP pair of its exchange (rdmalib.go),
// with its messages and output lines:
//
//   - send: the client SENDs each line of its input and its NUL; the
//     server prints "Received: LINE" and SENDs "ACK" and its NUL, which
//     the client receives before its next line ("Server acknowledged").
//   - write: the client RDMA WRITEs each line and its NUL to the start of
//     the server's buffer WITH_IMM, the immediate the length; the
//     server's receive completes and it prints "Received (LEN bytes):
//     LINE"; the client prints "Message sent successfully".
//   - read: the server holds a line of text; the client reads "START END"
//     lines and RDMA READs END-START+1 bytes from offset START, printing
//     "Read data (N bytes from position START): TEXT".
//   - lambda: the client RDMA WRITEs (WITH_IMM, 4096 bytes each) a
//     description of a function and where to put the result, the
//     function's machine code, and its input; the server runs the code
//     and RDMA WRITEs {int32 result, size_t output size, output} WITH_IMM
//     back. goroce runs no code that came over the wire: its server
//     answers every call with result -1, and its client does not call.
//
// The lines a client reads are at most 4095 bytes (the buffer less the
// NUL); empty lines are skipped, as the program does.

// rdmalibLine checks a line a send or write client is to send: it says
// why it does not go, or returns its length with the NUL.
func rdmalibLine(o *modeOpts, line string) (int, bool) {
	n := len(line) + 1
	if n > rdmalibBuf {
		fmt.Fprintf(o.out, "line of %d bytes is longer than %d; not sent\n", len(line), rdmalibBuf-1)
		return 0, false
	}
	return n, line != ""
}

// putCString writes str and its NUL at the start of b.
func putCString(b []byte, str string) {
	copy(b, str)
	b[len(str)] = 0
}

// rdmalibSendServer is the send server: each message is printed and
// answered with "ACK".
func rdmalibSendServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	fmt.Fprintln(o.out, "Send-Receive Server ready.")
	for {
		wc, err := s.expect(ctx, verbs.WCRecv)
		if err != nil {
			return sessionEnd(err)
		}
		fmt.Fprintf(o.out, "Received: %s\n", cString(s.mr.Bytes()[:wc.ByteLen]))
		// The next message's receive goes up before the answer leaves.
		if err := s.postRecv(0, 0, rdmalibBuf); err != nil {
			return err
		}
		if err := s.sendBytes(ctx, rdmalibBuf, []byte("ACK\x00"), nil); err != nil {
			return err
		}
	}
}

// rdmalibSendClient is the send client.
func rdmalibSendClient(ctx context.Context, s *session, o *modeOpts) error {
	fmt.Fprintln(o.out, "Connected to server. Enter messages (Ctrl+D to stop):")
	b := s.mr.Bytes()
	return lines(o, "", func(line string) error {
		n, ok := rdmalibLine(o, line)
		if !ok {
			return nil
		}
		if err := s.postRecv(1, rdmalibBuf, 64); err != nil {
			return err
		}
		putCString(b, line)
		if err := s.postSend(verbs.SendWR{ID: 2, Opcode: verbs.OpSend, SGL: s.sge(0, n)}); err != nil {
			return err
		}
		// The answer may complete before the SEND's own completion.
		if _, err := s.expectBoth(ctx, verbs.WCSend, verbs.WCRecv); err != nil {
			return s.settle(err)
		}
		s.settle(nil)
		if answer := cString(b[rdmalibBuf : rdmalibBuf+64]); answer != "ACK" {
			return fmt.Errorf("the server answered %q, not \"ACK\" (is it rdma-lib's send server?)", answer)
		}
		fmt.Fprintln(o.out, "Server acknowledged")
		return nil
	})
}

// rdmalibWriteServer is the write server: each WRITE_WITH_IMM's
// completion prints the start of the buffer and the immediate.
func rdmalibWriteServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	fmt.Fprintln(o.out, "Write Server ready.")
	for {
		wc, err := s.expect(ctx, verbs.WCRecvRDMAWithIm)
		if err != nil {
			return sessionEnd(err)
		}
		cli.SyncMR(s.mr) // the WRITE's data came with no completion of its own
		fmt.Fprintf(o.out, "Received (%d bytes): %s\n", wc.Imm, cString(s.mr.Bytes()[:rdmalibBuf]))
		// A WRITE_WITH_IMM that finds no receive is refused (RNR) before
		// its data lands: the next line cannot overwrite this one before
		// it is printed.
		if err := s.postRecv(0, 0, rdmalibBuf); err != nil {
			return err
		}
	}
}

// rdmalibWriteClient is the write client.
func rdmalibWriteClient(ctx context.Context, s *session, o *modeOpts) error {
	fmt.Fprintln(o.out, "Connected to server. Enter messages (Ctrl+D to stop):")
	return lines(o, "", func(line string) error {
		n, ok := rdmalibLine(o, line)
		if !ok {
			return nil
		}
		putCString(s.mr.Bytes(), line)
		if err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpWriteImm, Imm: uint32(n), SGL: s.sge(0, n),
			RemoteAddr: s.peer.addr, RKey: s.peer.rkey}, verbs.WCWrite); err != nil {
			return err
		}
		fmt.Fprintln(o.out, "Message sent successfully")
		return nil
	})
}

// rdmalibReadSetup takes the read server's text, before any client: from
// --text, or the first line of the input.
func rdmalibReadSetup(l *sessionListener, o *modeOpts) (any, error) {
	text, err := readText(o, rdmalibBuf-1, true)
	if err != nil {
		return nil, err
	}
	return text, nil
}

// rdmalibReadPrepare puts the text and its NUL at the start of a session's
// buffer.
func rdmalibReadPrepare(s *session, text any) {
	putCString(s.mr.Bytes(), text.(string))
	cli.SyncMR(s.mr)
}

// rdmalibReadServer is the read server: the client READs; the server
// waits for it to leave.
func rdmalibReadServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	// rdma-lib prints "Read Server ready." when its client has connected,
	// then asks for the text (readText asked before any client) and says
	// it waits.
	fmt.Fprintln(o.out, "Read Server ready.")
	fmt.Fprintln(o.out, "Waiting for client read requests...")
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rdmalibReadClient is the read client: an RDMA READ per "START END" line.
func rdmalibReadClient(ctx context.Context, s *session, o *modeOpts) error {
	fmt.Fprintln(o.out, "Connected to server.")
	fmt.Fprintln(o.out, "Enter character range to read (format: start_pos end_pos):")
	fmt.Fprintln(o.out, "Example: 0 5 to read first 6 characters")
	b := s.mr.Bytes()
	return lines(o, "", func(line string) error {
		var start, end int
		if _, err := fmt.Sscan(line, &start, &end); err != nil {
			fmt.Fprintln(o.out, "Invalid input. Please enter two numbers: start_pos end_pos")
			return nil
		}
		if start < 0 || end < start || end >= rdmalibBuf {
			fmt.Fprintf(o.out, "Invalid range. start must be >= 0, end must be >= start and < %d\n", rdmalibBuf)
			return nil
		}
		n := end - start + 1
		if err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpRead, SGL: s.sge(0, n), RemoteAddr: s.peer.addr + uint64(start),
			RKey: s.peer.rkey}, verbs.WCRead); err != nil {
			return err
		}
		fmt.Fprintf(o.out, "Read data (%d bytes from position %d): %s\n", n, start, cString(b[:n]))
		return nil
	})
}

// The lambda call, as rdma-lib's client writes it: struct lambda_metadata
// (function name, code size, input size, entry offset), then the client's
// struct qp_info_t, which says where the result goes (its buffer, as in
// the exchange).
const (
	lambdaNameLen   = 128           // LAMBDA_MAX_FUNCTION_NAME
	lambdaCodeSize  = lambdaNameLen // size_t code_size
	lambdaWrites    = 3             // the call, the code, the input
	lambdaResultLen = 4 + 8         // int result, size_t output size (no output)
	lambdaRefused   = -1            // the result goroce answers with (-EPERM)
)

// errRdmalibLambda is why goroce's lambda client does not run with
// rdma-lib's protocol.
var errRdmalibLambda = errors.New("lambda: goroce does not send machine code to run (rdma-lib's lambda server executes " +
	"what its client writes); --proto goroce calls the registered functions of a goroce server (" + lambdaNamesList() + ")")

// lambdaNamesList lists the registered functions for a sentence.
func lambdaNamesList() string { return strings.ReplaceAll(lambdaNames(), ",", ", ") }

// rdmalibLambdaSetup says, before any client, what the server does.
func rdmalibLambdaSetup(l *sessionListener, o *modeOpts) (any, error) {
	fmt.Fprintln(o.out, "Lambda server ready: goroce never runs code sent over the wire; every call is answered with error -1 "+
		"(--proto goroce serves "+lambdaNamesList()+")")
	return nil, nil
}

// rdmalibLambdaServer takes a call, refuses it, and answers result -1 with
// no output, so that rdma-lib's client ends at once ("Execution failed
// with error: -1") rather than waiting for ever. The three WRITE_WITH_IMMs
// of a call land at the start of the buffer, one receive each, and
// nothing holds the next back until the last is read: only the final
// packet of a WRITE needs the receive, its first ones land at once. So
// the call's name and code size are read as soon as it completes, and are
// only reported; the answer goes to the buffer the client described in
// the exchange, which is where rdma-lib's client asks for it.
func rdmalibLambdaServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	b := s.mr.Bytes()
	var name string
	var code uint64
	for i := range lambdaWrites {
		if _, err := s.expect(ctx, verbs.WCRecvRDMAWithIm); err != nil {
			if i == 0 {
				return sessionEnd(err)
			}
			return fmt.Errorf("lambda call %.40q: %w", name, err)
		}
		if i == 0 {
			cli.SyncMR(s.mr)
			name = cString(b[:lambdaNameLen])
			code = binary.LittleEndian.Uint64(b[lambdaCodeSize:])
		}
		if i+1 < lambdaWrites {
			if err := s.postRecv(0, 0, rdmalibBuf); err != nil {
				return err
			}
		}
	}
	res := b[rdmalibBuf : rdmalibBuf+lambdaResultLen]
	clear(res)
	result := int32(lambdaRefused)
	binary.LittleEndian.PutUint32(res, uint32(result))
	err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpWriteImm, Imm: lambdaResultLen, SGL: s.sge(rdmalibBuf, lambdaResultLen),
		RemoteAddr: s.peer.addr, RKey: s.peer.rkey}, verbs.WCWrite)
	answered := "answered error -1"
	if err != nil {
		answered = fmt.Sprintf("could not answer: %v", err)
	}
	return fmt.Errorf("lambda: refused to run %.40q (%d bytes of machine code from %s): goroce never runs code sent over the wire; %s",
		name, code, s.remote, answered)
}
