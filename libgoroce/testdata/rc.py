"""An RC WRITE and SEND between two processes with pyverbs (rdma-core's
Python bindings), run by TestPyverbs on goroce's device:

    python3 rc.py DEVICE PORT          # the server
    python3 rc.py DEVICE PORT HOST     # the client

The two exchange their QP numbers, keys and addresses over TCP, connect
an RC QP each, and the client WRITEs into the server's region and then
SENDs to it; the server checks both and answers with a SEND of its own.
"""

import json
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

SIZE = 4096
WRITTEN = b"written by the client's RDMA WRITE"
SENT = b"sent by the client's SEND"
ANSWER = b"the server's answer"


def poll(cq, want_opcode, what):
    """Polls cq for one completion, for at most 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        n, wcs = cq.poll()
        if n:
            wc = wcs[0]
            if wc.status != e.IBV_WC_SUCCESS or wc.opcode != want_opcode:
                sys.exit(f"{what}: status {wc.status}, opcode {wc.opcode}")
            return wc
        time.sleep(0.0005)
    sys.exit(f"{what}: no completion in 10 s")


def main():
    dev, port = sys.argv[1], int(sys.argv[2])
    server = len(sys.argv) == 3
    ctx = Context(name=dev)
    pd = PD(ctx)
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    mr = MR(pd, SIZE, access)
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    gid = ctx.query_gid(1, 0)

    if server:
        ls = socket.create_server(("127.0.0.1", port))
        conn, _ = ls.accept()
    else:
        conn = socket.create_connection((sys.argv[3], port))
    f = conn.makefile("rw")
    f.write(json.dumps({"qpn": qp.qp_num, "rkey": mr.rkey, "addr": mr.buf}) + "\n")
    f.flush()
    peer = json.loads(f.readline())

    attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
    attr.pkey_index = 0
    attr.qp_access_flags = access
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    attr = QPAttr(qp_state=e.IBV_QPS_RTR)
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = peer["qpn"]
    attr.rq_psn = 0
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=0, hop_limit=64), is_global=1, port_num=1)
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
              e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    attr = QPAttr(qp_state=e.IBV_QPS_RTS)
    attr.sq_psn = 0
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.max_rd_atomic = 1
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT |
              e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)

    recv = RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf + 2048, 1024, mr.lkey)])
    qp.post_recv(recv)
    f.write("ready\n")
    f.flush()
    if f.readline().strip() != "ready":
        sys.exit("the peer is not ready")

    if server:
        # The client WRITEs, then SENDs: the SEND's receive tells the
        # WRITE has landed (RC keeps them in order).
        wc = poll(cq, e.IBV_WC_RECV, "the SEND's receive")
        got = mr.read(len(SENT), 2048)
        if wc.byte_len != len(SENT) or got != SENT:
            sys.exit(f"received {got!r} ({wc.byte_len} bytes), want {SENT!r}")
        got = mr.read(len(WRITTEN), 0)
        if got != WRITTEN:
            sys.exit(f"the region holds {got!r}, want {WRITTEN!r}")
        mr.write(ANSWER, len(ANSWER), 1024)
        qp.post_send(SendWR(wr_id=3, opcode=e.IBV_WR_SEND, num_sge=1,
                            sg=[SGE(mr.buf + 1024, len(ANSWER), mr.lkey)], send_flags=e.IBV_SEND_SIGNALED))
        poll(cq, e.IBV_WC_SEND, "the answer's SEND")
        print("pyverbs server: WRITE and SEND received, answer sent")
    else:
        mr.write(WRITTEN, len(WRITTEN), 0)
        wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(mr.buf, len(WRITTEN), mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(peer["rkey"], peer["addr"])
        qp.post_send(wr)
        poll(cq, e.IBV_WC_RDMA_WRITE, "the WRITE")
        mr.write(SENT, len(SENT), 1024)
        qp.post_send(SendWR(wr_id=3, opcode=e.IBV_WR_SEND, num_sge=1,
                            sg=[SGE(mr.buf + 1024, len(SENT), mr.lkey)], send_flags=e.IBV_SEND_SIGNALED))
        poll(cq, e.IBV_WC_SEND, "the SEND")
        wc = poll(cq, e.IBV_WC_RECV, "the answer's receive")
        got = mr.read(len(ANSWER), 2048)
        if got != ANSWER:
            sys.exit(f"the answer is {got!r}, want {ANSWER!r}")
        print("pyverbs client: WRITE and SEND done, answer received")
    f.write("done\n")
    f.flush()
    f.readline()
    qp.close()
    cq.close()
    mr.close()
    pd.close()
    ctx.close()


if __name__ == "__main__":
    main()
