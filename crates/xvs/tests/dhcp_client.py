"""A minimal DHCP client for the OVN tests: sends one DHCPDISCOVER from
0.0.0.0:68 to 255.255.255.255:67 with the interface's MAC, over a raw
AF_PACKET socket (the interface has no address to receive the offer on),
and prints the first DHCP reply for it: `OFFER yiaddr=A router=R lease=S`.
Exits 1 if none comes within the timeout.

    python3 dhcp_client.py IFNAME MAC [TIMEOUT_S]
"""
import random, socket, struct, sys, time


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def main():
    ifname, mac_s = sys.argv[1], sys.argv[2]
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    mac = bytes.fromhex(mac_s.replace(":", ""))
    xid = random.getrandbits(32)
    bootp = struct.pack("!BBBBIHH", 1, 1, 6, 0, xid, 0, 0x8000) + b"\0" * 16 + mac + b"\0" * 10 + b"\0" * 192
    opts = b"\x63\x82\x53\x63" + b"\x35\x01\x01" + b"\x37\x03\x01\x03\x33" + b"\xff"
    payload = bootp + opts
    udp = struct.pack("!HHHH", 68, 67, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, b"\0" * 4, b"\xff" * 4)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    frame = b"\xff" * 6 + mac + b"\x08\x00" + ip + udp
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
    s.bind((ifname, 0))
    s.settimeout(0.5)
    deadline = time.time() + timeout
    next_send = 0.0
    while time.time() < deadline:
        if time.time() >= next_send:
            s.send(frame)
            next_send = time.time() + 1.0
        try:
            f = s.recv(4096)
        except socket.timeout:
            continue
        if len(f) < 14 + 20 + 8 + 240 or f[12:14] != b"\x08\x00" or f[23] != 17:
            continue
        ihl = (f[14] & 15) * 4
        u = 14 + ihl
        if struct.unpack("!H", f[u + 2 : u + 4])[0] != 68:
            continue
        b = f[u + 8 :]
        if b[0] != 2 or struct.unpack("!I", b[4:8])[0] != xid:
            continue
        yiaddr = socket.inet_ntoa(b[16:20])
        o, i, info = b[240:], 0, {}
        while i < len(o) and o[i] != 255:
            if o[i] == 0:
                i += 1
                continue
            t, l = o[i], o[i + 1]
            info[t] = o[i + 2 : i + 2 + l]
            i += 2 + l
        kind = {2: "OFFER", 5: "ACK", 6: "NAK"}.get(info.get(53, b"\0")[0], "?")
        router = socket.inet_ntoa(info[3][:4]) if 3 in info else "-"
        lease = struct.unpack("!I", info[51])[0] if 51 in info else 0
        print(f"{kind} yiaddr={yiaddr} router={router} lease={lease}")
        return 0
    print("no DHCP reply", file=sys.stderr)
    return 1


sys.exit(main())
