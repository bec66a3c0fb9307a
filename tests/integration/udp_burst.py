"""Send UDP datagrams to one destination from many source ports (run inside a Mininet host).

    python udp_burst.py DST_IP FIRST_SPORT COUNT PACKETS_PER_PORT

RoCEv2 puts its ECMP entropy in the UDP source port; this imitates N queue pairs
between one pair of NICs, each on its own source port, to dport 4791.
"""

import socket
import sys
import time

dst, first, count, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for sport in range(first, first + count):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", sport))
        for _ in range(per):
            s.sendto(b"x" * 64, (dst, 4791))
            time.sleep(0.001)  # stay far below the emulated link rate
print("sent", count * per)
