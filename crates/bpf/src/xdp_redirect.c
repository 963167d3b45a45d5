// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// xvs XDP program: hand every frame to the AF_XDP socket registered for the
// receive queue it arrived on, or to the kernel stack if there is none.
//
// The map is indexed by rx queue. bpf_redirect_map() takes the fallback
// action in the low bits of its flags argument (kernel >= 5.3), so a missing
// entry yields XDP_PASS without a separate lookup.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define XVS_MAX_QUEUES 64

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XVS_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

/*
 * The kernel fast path: exact-match entries that userspace offloads for
 * hot megaflows whose actions the kernel can do. A frame whose parsed
 * fields equal an entry's key, and whose entry carries the current
 * generation, is rewritten and redirected through xvs_tx to its output
 * device without reaching the AF_XDP socket. Everything else (no entry, a
 * stale generation, a frame the parser does not fully understand) goes to
 * the socket exactly as before.
 *
 * Soundness: the key is exact on every field the parser reads, so an entry
 * matches only frames identical in all of them; userspace offers an entry
 * only for a megaflow whose mask lies within those fields, so every frame
 * the entry matches also matches the megaflow and gets its actions. When
 * the OpenFlow tables, ports, groups, meters or MAC table change, userspace
 * bumps xvs_gen[0] before it acknowledges the change; from then on no old
 * entry matches (its gen differs) until userspace revalidates and rewrites
 * it with the new generation.
 */

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>

#define XVS_FLOWS 16384

struct xvs_fkey {
	__u32 ifindex;
	__u16 vlan_tci;		/* host order, 0x1000 set when tagged */
	__u16 dl_type;		/* host order */
	__u8 dl_dst[6];
	__u8 dl_src[6];
	__u8 nw_proto;
	__u8 nw_tos;
	__u8 nw_ttl;
	__u8 pad;
	__u16 tp_src;		/* host order; ICMP type */
	__u16 tp_dst;		/* host order; ICMP code */
	__u8 nw_src[16];	/* as on the wire; IPv4 in the first 4 bytes */
	__u8 nw_dst[16];
	__u32 ipv6_label;	/* host order */
};

#define XVS_POP_VLAN 1
#define XVS_PUSH_VLAN 2
#define XVS_SET_DL_SRC 4
#define XVS_SET_DL_DST 8
#define XVS_SET_TTL 16
#define XVS_ENCAP 32
#define XVS_SET_NW_SRC 64
#define XVS_SET_NW_DST 128
#define XVS_SET_TP_SRC 256
#define XVS_SET_TP_DST 512
#define XVS_NAT (XVS_SET_NW_SRC | XVS_SET_NW_DST | XVS_SET_TP_SRC | XVS_SET_TP_DST)
/* The entry serves packets of tracked connections: TCP segments with SYN,
 * FIN or RST go to userspace, whose tracker moves the connection's state
 * on them (and withdraws the entry); so do segments without ACK, whose
 * flags no stack sends on an established connection and the tracker
 * calls invalid. */
#define XVS_CT 1024

/* Largest outer header an entry can push (Ethernet, IPv4, UDP, Geneve with
 * up to 30 bytes of options). */
#define XVS_ENCAP_MAX 80

struct xvs_fact {
	__u32 out_ifindex;
	__u32 slot;		/* index of the entry's counters */
	__u64 gen;
	__u16 flags;
	__u16 vlan_tci;		/* host order, pushed without the 0x1000 bit */
	__u8 dl_src[6];
	__u8 dl_dst[6];
	__u8 ttl;
	/* Tunnel encapsulation, last before the output (XVS_ENCAP): push
	 * `encap_len` bytes of `hdr` (Ethernet, IPv4 at offset 14, then UDP at
	 * `encap_udp`, or GRE when that is 0), then fill the per-frame fields:
	 * IPv4 total length, identification and checksum (from `encap_sum`,
	 * the header's folded sum with those three zero), UDP length. Frames
	 * longer than `encap_max` go to userspace untouched. */
	__u8 encap_udp;
	__u16 encap_len;
	__u16 encap_max;
	__u16 encap_sum;
	__u8 hdr[XVS_ENCAP_MAX];
	/* NAT of a tracked connection (IPv4 TCP or UDP, XVS_SET_NW_* and
	 * XVS_SET_TP_*): the addresses (as on the wire) and ports (host order)
	 * to write, with the IPv4 and L4 checksums updated incrementally
	 * (RFC 1624). A frame whose L4 checksum is still partial (a sender's
	 * checksum offload) goes to userspace, which completes it. */
	__u8 nat_src[4];
	__u8 nat_dst[4];
	__u16 nat_sport;
	__u16 nat_dport;
	__u32 pad_end;
};

struct xvs_fcount {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XVS_FLOWS);
	__type(key, struct xvs_fkey);
	__type(value, struct xvs_fact);
} xvs_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XVS_FLOWS);
	__type(key, __u32);
	__type(value, struct xvs_fcount);
} xvs_fcounts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} xvs_gen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} xvs_tx SEC(".maps");

/*
 * Decapsulation. A Geneve (without options, or with 8 bytes of them: the
 * one option OVN sends) or VXLAN frame over IPv4 to a UDP port in
 * xvs_dports (value 2 for Geneve, whose first byte gives the options'
 * length; 1 for VXLAN), whose outer headers and inner frame equal a
 * xvs_dflows key, is popped (the 50 or 58 outer bytes dropped) and then handled
 * as an entry of xvs_flows would handle the inner frame. The key holds
 * every outer field the tunnel metadata or the underlay bridge's decision
 * comes from (MACs, addresses, TOS, TTL, DF, UDP port, the tunnel header
 * itself byte for byte) and the inner frame's parsed fields; the outer
 * UDP source port and IPv4 identification are not in it (nothing reads
 * them). Frames with an outer UDP checksum, IP options, Ethernet padding,
 * or anything else the key does not cover go to userspace unchanged.
 */
struct xvs_dkey {
	struct xvs_fkey inner;	/* inner.ifindex: the receiving device */
	__u8 dmac[6];
	__u8 smac[6];
	__u32 saddr;		/* as on the wire */
	__u32 daddr;
	__u8 tos;
	__u8 ttl;
	__u8 df;		/* 1 when DF is set */
	__u8 pad;
	__u16 dport;		/* host order */
	__u16 pad2;
	__u8 th[16];		/* the Geneve or VXLAN header as on the wire,
				 * then a Geneve frame's options (zeros when
				 * it has none: its first byte says which) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XVS_FLOWS);
	__type(key, struct xvs_dkey);
	__type(value, struct xvs_fact);
} xvs_dflows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u16);
	__type(value, __u8);
} xvs_dports SEC(".maps");

#define XVS_OUTER 50	/* Ethernet, IPv4 without options, UDP, 8-byte tunnel header */
#define XVS_DPORT_GENEVE 2

/* Fast-path outcomes, per CPU: 0 hit, 1 miss, 2 stale generation,
 * 3 not parsed (left to userspace), 4 dropped (a rewrite failed),
 * 5 too long to encapsulate (left to userspace), 6 a tracked connection's
 * segment the tracker must see (SYN, FIN, RST) or, where the program does
 * not finish checksums, a partial checksum before NAT (left to userspace),
 * 7 a partial checksum too long to finish here (left to userspace,
 * untouched). And one count beside them: 8 partial checksums the program
 * finished (those frames are also counted as hits). */
#define XVS_FSTATS 9
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XVS_FSTATS);
	__type(key, __u32);
	__type(value, __u64);
} xvs_fstats SEC(".maps");

static __always_inline void fstat(__u32 i)
{
	__u64 *n = bpf_map_lookup_elem(&xvs_fstats, &i);
	if (n)
		*n += 1;
}

/*
 * Partial checksums. A local sender (a namespace or container on a veth,
 * whose default is tx-checksumming on) leaves its TCP and UDP checksums
 * to "hardware": the field holds only the folded pseudo-header sum, and
 * the skb says where the real sum is to go (CHECKSUM_PARTIAL). In generic
 * (skb) mode that skb, with its promise, is what a redirect forwards, so
 * the receiver or the output device finishes the sum. In native mode the
 * frame reaches this program as bare bytes and a redirect sends only the
 * bytes: the promise is gone, and the receiver would drop the frame for
 * its checksum. So in native mode (XVS_CONF_FINISH_CSUM, written by the
 * loader for the mode the program was attached in) the program finishes
 * such a checksum itself before forwarding the frame, as the hardware
 * would: the one's-complement sum of the L4 bytes, the field's
 * pseudo-header sum included, complemented. A frame whose complete
 * checksum merely equals its pseudo-header sum (1 in 65,536) gets the
 * same value back, so a frame that only looks partial costs time, never
 * correctness.
 */
#define XVS_CONF_FINISH_CSUM 1

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} xvs_conf SEC(".maps");

/* L4 bytes are summed in chunks copied here (bpf_csum_diff takes at most
 * 512 bytes; the copy makes every chunk's length one the verifier can
 * bound), with room for three bytes of zero padding after the last. */
#define XVS_CSUM_CHUNK 512
#define XVS_CSUM_MAX 4096

struct xvs_scratch {
	__u8 b[XVS_CSUM_CHUNK + 4];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xvs_scratch);
} xvs_scratch SEC(".maps");

/* Fills the key; returns 0 if the frame is one the fast path may serve.
 * A frame userspace's parser refuses (and so drops) is not one: an IP
 * datagram longer than the frame or shorter than its own header, or a
 * TCP, UDP, SCTP or ICMP header cut short by the datagram's end (or, for
 * TCP, a data offset outside it). Such a frame goes to userspace, whose
 * parser counts and drops it; serving it here would forward what the
 * switch otherwise drops. */
static __always_inline int parse(struct xdp_md *ctx, struct xvs_fkey *k, int *l3)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	int off = sizeof(*eth);
	__u32 l4len;
	__u16 type;

	if ((void *)(eth + 1) > end)
		return -1;
	__builtin_memcpy(k->dl_dst, eth->h_dest, 6);
	__builtin_memcpy(k->dl_src, eth->h_source, 6);
	type = bpf_ntohs(eth->h_proto);
	if (type == ETH_P_8021Q) {
		__u16 *tag = data + off;
		if ((void *)(tag + 2) > end)
			return -1;
		k->vlan_tci = bpf_ntohs(tag[0]) | 0x1000;
		type = bpf_ntohs(tag[1]);
		off += 4;
	}
	/* ARP and RARP (whose fields userspace's key holds and this one does
	 * not), further tags, 802.3. */
	if (type == ETH_P_8021Q || type == ETH_P_8021AD || type == ETH_P_ARP || type == ETH_P_RARP || type < 0x600)
		return -1;
	/* MPLS: userspace drops a frame cut inside its label stack entry. */
	if ((type == ETH_P_MPLS_UC || type == ETH_P_MPLS_MC) && data + off + 4 > end)
		return -1;
	k->dl_type = type;
	*l3 = off;
	if (type == ETH_P_IP) {
		struct iphdr *ip = data + off;
		__u32 ihl, tot;
		if ((void *)(ip + 1) > end || ip->version != 4)
			return -1;
		ihl = ip->ihl * 4;
		if (ihl < 20 || (ip->frag_off & bpf_htons(0x3fff)))
			return -1;
		tot = bpf_ntohs(ip->tot_len);
		if (tot < ihl || tot > (__u32)(end - data) - off)
			return -1;
		k->nw_proto = ip->protocol;
		k->nw_tos = ip->tos;
		k->nw_ttl = ip->ttl;
		__builtin_memcpy(k->nw_src, &ip->saddr, 4);
		__builtin_memcpy(k->nw_dst, &ip->daddr, 4);
		off += ihl;
		l4len = tot - ihl;
	} else if (type == ETH_P_IPV6) {
		struct ipv6hdr *ip6 = data + off;
		if ((void *)(ip6 + 1) > end || ip6->version != 6)
			return -1;
		l4len = bpf_ntohs(ip6->payload_len);
		if (l4len > (__u32)(end - data) - off - sizeof(*ip6))
			return -1;
		k->nw_proto = ip6->nexthdr;
		k->nw_tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
		k->nw_ttl = ip6->hop_limit;
		k->ipv6_label = ((__u32)(ip6->flow_lbl[0] & 0xf) << 16) | ((__u32)ip6->flow_lbl[1] << 8) | ip6->flow_lbl[2];
		__builtin_memcpy(k->nw_src, &ip6->saddr, 16);
		__builtin_memcpy(k->nw_dst, &ip6->daddr, 16);
		off += sizeof(*ip6);
	} else {
		return 0;
	}
	switch (k->nw_proto) {
	case 6: case 17: case 132: {
		__u8 *t = data + off;
		__u32 hl = k->nw_proto == 6 ? 20 : k->nw_proto == 17 ? 8 : 12;
		if (l4len < hl || (void *)(t + 4) > end)
			return -1;
		if (k->nw_proto == 6) {
			__u32 doff;
			if ((void *)(t + 20) > end)
				return -1;
			doff = (t[12] >> 4) * 4;
			if (doff < 20 || doff > l4len)
				return -1;
		}
		k->tp_src = ((__u32)t[0] << 8) | t[1];
		k->tp_dst = ((__u32)t[2] << 8) | t[3];
		return 0;
	}
	case 1: case 58: {
		__u8 *t = data + off;
		if (l4len < 4 || (void *)(t + 2) > end)
			return -1;
		if (k->nw_proto == 58 && t[0] >= 133 && t[0] <= 137)
			return -1;	/* neighbour discovery: more fields */
		k->tp_src = t[0];
		k->tp_dst = t[1];
		return 0;
	}
	case 0: case 43: case 44: case 50: case 51: case 60: case 135: case 139: case 140:
		return -1;	/* IPv6 extension headers: not parsed here */
	default:
		return 0;
	}
}

/* The entry for a tunnel frame whose outer fields `k` holds (l3 at 14):
 * on a hit the outer headers are gone from the frame (`*popped` says how
 * many bytes they were), `k` and `l3` are the
 * inner frame's; otherwise the frame is as it was and NULL comes back. */
static __always_inline struct xvs_fact *decap_lookup(struct xdp_md *ctx, struct xvs_fkey *k, int *l3, __u64 g,
						    __u8 kind, int *popped)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct xvs_dkey dk = {};
	struct iphdr *ip = data + 14;
	__u16 *udp = data + 34;
	struct xvs_fact *a;
	__u32 len = end - data;
	int outer = XVS_OUTER;

	if (data + XVS_OUTER + 8 > end)
		return NULL;
	if (kind == XVS_DPORT_GENEVE) {
		__u8 olen = (*(__u8 *)(data + 42) & 0x3f) * 4;
		if (olen == 8)
			outer = XVS_OUTER + 8;
		else if (olen != 0)
			return NULL;
	}
	if (ip->ihl != 5 || bpf_ntohs(ip->tot_len) + 14 != len || bpf_ntohs(udp[2]) + 34 != len || udp[3] != 0)
		return NULL;
	__builtin_memcpy(dk.dmac, k->dl_dst, 6);
	__builtin_memcpy(dk.smac, k->dl_src, 6);
	dk.saddr = ip->saddr;
	dk.daddr = ip->daddr;
	dk.tos = ip->tos;
	dk.ttl = ip->ttl;
	dk.df = (ip->frag_off & bpf_htons(0x4000)) ? 1 : 0;
	dk.dport = k->tp_dst;
	__builtin_memcpy(dk.th, data + 42, 8);
	if (outer > XVS_OUTER)
		__builtin_memcpy(dk.th + 8, data + 50, 8);
	if (bpf_xdp_adjust_head(ctx, outer))
		return NULL;
	dk.inner.ifindex = ctx->ingress_ifindex;
	if (parse(ctx, &dk.inner, l3) < 0)
		goto restore;
	a = bpf_map_lookup_elem(&xvs_dflows, &dk);
	if (!a)
		goto restore;
	if (a->gen != g || (a->flags & XVS_ENCAP))
		goto restore;
	*k = dk.inner;
	*popped = outer;
	return a;
restore:
	/* Back to the outer frame, whose bytes are still there. */
	bpf_xdp_adjust_head(ctx, -outer);
	return NULL;
}

/* One's-complement sum helpers for incremental updates (RFC 1624), on
 * 16-bit words as they lie in the frame (the sum does not depend on byte
 * order as long as every word is read the same way). */
static __always_inline __u32 csum_acc(__u32 acc, __u16 old, __u16 new)
{
	return acc + (__u16)~old + new;
}

static __always_inline __u16 csum_done(__u32 acc)
{
	acc = (acc & 0xffff) + (acc >> 16);
	acc = (acc & 0xffff) + (acc >> 16);
	return ~acc & 0xffff;
}

/* Folds a 32-bit one's-complement sum to 16 bits (not complemented). */
static __always_inline __u16 csum_fold16(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return s;
}

/* The folded pseudo-header sum a sender leaves in a partial checksum's
 * field, for an L4 segment of `l4len` bytes; on 16-bit words as they lie
 * in the frame, like every sum here. */
static __always_inline __u16 pseudo_sum(const struct xvs_fkey *k, __u32 l4len)
{
	const __u16 *s = (const __u16 *)k->nw_src;
	const __u16 *d = (const __u16 *)k->nw_dst;
	__u32 sum = bpf_htons(k->nw_proto) + bpf_htons(l4len & 0xffff);
	int i, n = k->dl_type == ETH_P_IP ? 2 : 8;

	for (i = 0; i < 8; i++) {
		if (i >= n)
			break;
		sum += s[i] + d[i];
	}
	return csum_fold16(sum);
}

/* Where a frame's TCP or UDP checksum field lies: sets the L4 offset and
 * length (from the IP header) and returns the field's offset in the L4
 * header, or 0 when the frame has no such field (other protocols; `l3` is
 * where the IP header starts, 14 or 18). */
static __always_inline __u32 l4_csum_at(struct xdp_md *ctx, const struct xvs_fkey *k, int l3, __u32 *l4off,
					__u32 *l4len)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 at;

	if (k->nw_proto == 6)
		at = 16;
	else if (k->nw_proto == 17)
		at = 6;
	else
		return 0;
	if (l3 != 14 && l3 != 18)
		return 0;
	if (k->dl_type == ETH_P_IP) {
		struct iphdr *ip = data + l3;
		__u32 ihl, tot;
		if ((void *)(ip + 1) > end)
			return 0;
		ihl = (ip->ihl & 0xf) * 4;
		tot = bpf_ntohs(ip->tot_len);
		if (tot < ihl + at + 2)
			return 0;
		*l4off = l3 + ihl;
		*l4len = tot - ihl;
	} else if (k->dl_type == ETH_P_IPV6) {
		struct ipv6hdr *ip6 = data + l3;
		if ((void *)(ip6 + 1) > end)
			return 0;
		*l4len = bpf_ntohs(ip6->payload_len);
		if (*l4len < at + 2)
			return 0;
		*l4off = l3 + sizeof(*ip6);
	} else {
		return 0;
	}
	if (*l4off + *l4len > (__u32)(end - data))
		return 0;	/* shorter than its IP header says */
	return at;
}

/* Finishes a partial TCP/UDP checksum (see XVS_CONF_FINISH_CSUM): returns
 * 1 when it did, 0 when the checksum was not partial, and -1, with the
 * frame untouched, when it is partial but longer than the program sums. */
static __always_inline int csum_finish(struct xdp_md *ctx, const struct xvs_fkey *k, int l3)
{
	struct xvs_scratch *sc;
	__u32 l4off = 0, l4len = 0, at, off, left, sum = 0, zero = 0;
	__u16 c, *field;
	void *data, *end;
	int i;

	at = l4_csum_at(ctx, k, l3, &l4off, &l4len);
	if (!at || l4off > 128)
		return 0;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	field = data + l4off + at;
	if ((void *)(field + 1) > end || *field != pseudo_sum(k, l4len))
		return 0;	/* complete already */
	if (l4len > XVS_CSUM_MAX)
		return -1;
	sc = bpf_map_lookup_elem(&xvs_scratch, &zero);
	if (!sc)
		return -1;
	off = l4off;
	left = l4len;
	for (i = 0; i < XVS_CSUM_MAX / XVS_CSUM_CHUNK; i++) {
		__u64 n = left < XVS_CSUM_CHUNK ? left : XVS_CSUM_CHUNK;
		__s64 r;
		/* The compiler knows n is at most 512; the verifier must be
		 * told again, on the register the helpers get. */
		asm volatile("" : "+r"(n));
		if (n == 0)
			break;
		if (n > XVS_CSUM_CHUNK)
			return -1;
		if (bpf_xdp_load_bytes(ctx, off, sc->b, n))
			return -1;
		/* An odd tail sums as if padded with zeros. */
		sc->b[n] = 0;
		sc->b[n + 1] = 0;
		sc->b[n + 2] = 0;
		r = bpf_csum_diff(NULL, 0, (__be32 *)sc->b, (n + 3) & ~3ull, sum);
		if (r < 0)
			return -1;
		sum = (__u32)r;
		off += n;
		left -= n;
	}
	if (left)
		return -1;
	c = ~csum_fold16(sum) & 0xffff;
	/* UDP: 0 means "no checksum"; its equivalent is all ones. */
	if (k->nw_proto == 17 && c == 0)
		c = 0xffff;
	/* Packet pointers taken again after the helper calls. */
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	field = data + l4off + at;
	if ((void *)(field + 1) > end)
		return -1;
	*field = c;
	return 1;
}

/* Whether a frame an XVS_CT entry matched must go to userspace instead:
 * a TCP segment with SYN, FIN or RST, or without ACK, or (for NAT, where the program does
 * not finish checksums) a TCP/UDP checksum that is still the sender's
 * partial pseudo-header sum. `l3` is 14 or 18. */
static __always_inline int ct_slow(struct xdp_md *ctx, struct xvs_fkey *k, int l3, struct xvs_fact *a,
				   int finish)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *l4;
	__u16 *field = NULL;
	__u32 l4len;

	if (l3 != 14 && l3 != 18)
		return 1;
	if (k->dl_type == ETH_P_IP) {
		struct iphdr *ip = data + l3;
		__u32 ihl;
		if ((void *)(ip + 1) > end)
			return 1;
		ihl = (ip->ihl & 0xf) * 4;
		l4 = (__u8 *)ip + ihl;
		l4len = bpf_ntohs(ip->tot_len) - ihl;
	} else if (k->dl_type == ETH_P_IPV6) {
		struct ipv6hdr *ip6 = data + l3;
		if ((void *)(ip6 + 1) > end)
			return 1;
		l4 = (__u8 *)(ip6 + 1);
		l4len = bpf_ntohs(ip6->payload_len);
	} else {
		return 0;
	}
	if (k->nw_proto == 6) {
		if ((void *)(l4 + 20) > end)
			return 1;
		/* FIN, SYN, RST, or no ACK: only ACK (with URG, PSH, ECE or
		 * CWR, or none) is a valid segment of an established one. */
		if ((l4[13] & 0x17) != 0x10)
			return 1;
		field = (__u16 *)(l4 + 16);
	} else if (k->nw_proto == 17) {
		if ((void *)(l4 + 8) > end)
			return 1;
		field = (__u16 *)(l4 + 6);
	}
	if ((a->flags & XVS_NAT) && field) {
		if (k->dl_type != ETH_P_IP)
			return 1;
		if (!finish && *field == pseudo_sum(k, l4len))
			return 1;
	}
	return 0;
}

/* Writes an IPv4 address (both checksums cover it: the IPv4 header's and,
 * through the pseudo-header, the L4 one). */
static __always_inline void set_addr(__be32 *field, const __u8 *to, __u32 *ipacc, __u32 *l4acc)
{
	__u16 *o = (__u16 *)field;
	const __u16 *n = (const __u16 *)to;

	*ipacc = csum_acc(csum_acc(*ipacc, o[0], n[0]), o[1], n[1]);
	*l4acc = csum_acc(csum_acc(*l4acc, o[0], n[0]), o[1], n[1]);
	__builtin_memcpy(field, to, 4);
}

/* The NAT rewrite of an XVS_CT entry (IPv4 TCP or UDP; `l3` 14 or 18). */
static __always_inline int nat_rewrite(struct xdp_md *ctx, int l3, struct xvs_fact *a)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip;
	__u16 *ports, *l4c = NULL;
	__u16 nv;
	__u32 ipacc, l4acc, ihl;

	if (l3 != 14 && l3 != 18 && l3 != 22)
		return -1;
	ip = data + l3;
	if ((void *)(ip + 1) > end)
		return -1;
	ihl = (ip->ihl & 0xf) * 4;
	if (ihl < 20)
		return -1;
	ports = (void *)ip + ihl;
	if ((void *)(ports + 4) > end)
		return -1;
	if (ip->protocol == 6) {
		if ((void *)(ports + 10) > end)
			return -1;
		l4c = ports + 8;
	} else if (ip->protocol == 17) {
		if (ports[3])
			l4c = ports + 3;
	} else {
		return -1;
	}
	ipacc = (__u16)~ip->check;
	l4acc = l4c ? (__u16)~*l4c : 0;
	if (a->flags & XVS_SET_NW_SRC)
		set_addr(&ip->saddr, a->nat_src, &ipacc, &l4acc);
	if (a->flags & XVS_SET_NW_DST)
		set_addr(&ip->daddr, a->nat_dst, &ipacc, &l4acc);
	if (a->flags & XVS_SET_TP_SRC) {
		nv = bpf_htons(a->nat_sport);
		l4acc = csum_acc(l4acc, ports[0], nv);
		ports[0] = nv;
	}
	if (a->flags & XVS_SET_TP_DST) {
		nv = bpf_htons(a->nat_dport);
		l4acc = csum_acc(l4acc, ports[1], nv);
		ports[1] = nv;
	}
	ip->check = csum_done(ipacc);
	if (l4c) {
		__u16 c = csum_done(l4acc);
		/* UDP: 0 means "no checksum"; its equivalent is all ones. */
		if (ip->protocol == 17 && c == 0)
			c = 0xffff;
		*l4c = c;
	}
	return 0;
}

static __always_inline int fast_path(struct xdp_md *ctx)
{
	struct xvs_fkey k = {};
	struct xvs_fact *a;
	struct xvs_fcount *c;
	__u64 *gen;
	__u32 zero = 0, *conf;
	int l3 = 0, finish, popped = 0;

	/* Generation 0 means offload is off: no parse, no lookup, so the
	 * AF_XDP path costs what it did before the fast path existed. */
	gen = bpf_map_lookup_elem(&xvs_gen, &zero);
	if (!gen || *gen == 0)
		return -1;
	k.ifindex = ctx->ingress_ifindex;
	if (parse(ctx, &k, &l3) < 0) {
		fstat(3);
		return -1;
	}
	a = bpf_map_lookup_elem(&xvs_flows, &k);
	if (!a && k.dl_type == ETH_P_IP && k.nw_proto == 17 && l3 == 14) {
		__u16 dport = k.tp_dst;
		__u8 *kind = bpf_map_lookup_elem(&xvs_dports, &dport);
		if (kind)
			a = decap_lookup(ctx, &k, &l3, *gen, *kind, &popped);
	}
	if (!a) {
		fstat(1);
		return -1;
	}
	if (a->gen != *gen) {
		fstat(2);
		return -1;
	}
	if (a->flags & XVS_ENCAP) {
		/* The length the inner frame will have, checked before anything
		 * is rewritten: userspace handles (and counts) what would not
		 * fit the underlay. */
		__u32 len = ctx->data_end - ctx->data;
		if (a->flags & XVS_POP_VLAN)
			len -= 4;
		if (a->flags & XVS_PUSH_VLAN)
			len += 4;
		if (len > a->encap_max) {
			fstat(5);
			return -1;
		}
	}
	conf = bpf_map_lookup_elem(&xvs_conf, &zero);
	finish = conf && (*conf & XVS_CONF_FINISH_CSUM);
	if ((a->flags & (XVS_CT | XVS_NAT)) && ct_slow(ctx, &k, l3, a, finish)) {
		fstat(6);
		goto leave;
	}
	/* The last decision before the frame is committed to the kernel: a
	 * partial checksum is finished here, or the frame goes to userspace
	 * as it came. */
	if (finish) {
		int f = csum_finish(ctx, &k, l3);
		if (f < 0) {
			fstat(7);
			goto leave;
		}
		if (f)
			fstat(8);
	}
	c = bpf_map_lookup_elem(&xvs_fcounts, &a->slot);
	if (c) {
		c->packets += 1;
		c->bytes += ctx->data_end - ctx->data;
	}
	if (a->flags & XVS_POP_VLAN) {
		void *data = (void *)(long)ctx->data;
		void *end = (void *)(long)ctx->data_end;
		if (data + 16 > end)
			goto fail;
		__builtin_memmove(data + 4, data, 12);
		if (bpf_xdp_adjust_head(ctx, 4))
			goto fail;
		l3 -= 4;
	}
	if (a->flags & XVS_PUSH_VLAN) {
		void *data, *end;
		__u16 *tag;
		if (bpf_xdp_adjust_head(ctx, -4))
			goto fail;
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		if (data + 18 > end)
			goto fail;
		__builtin_memmove(data, data + 4, 12);
		tag = data + 12;
		tag[0] = bpf_htons(ETH_P_8021Q);
		tag[1] = bpf_htons(a->vlan_tci & ~0x1000);
		l3 += 4;
	}
	{
		void *data = (void *)(long)ctx->data;
		void *end = (void *)(long)ctx->data_end;
		struct ethhdr *eth = data;
		if ((void *)(eth + 1) > end)
			goto fail;
		if (a->flags & XVS_SET_DL_SRC)
			__builtin_memcpy(eth->h_source, a->dl_src, 6);
		if (a->flags & XVS_SET_DL_DST)
			__builtin_memcpy(eth->h_dest, a->dl_dst, 6);
		if (a->flags & XVS_SET_TTL) {
			if (l3 < 14 || l3 > 22)
				goto fail;
			if (k.dl_type == ETH_P_IP) {
				struct iphdr *ip = data + l3;
				if ((void *)(ip + 1) > end)
					goto fail;
				/* RFC 1624: the TTL shares a 16-bit word with the protocol. */
				__u32 old = bpf_ntohs(*(__u16 *)&ip->ttl);
				ip->ttl = a->ttl;
				__u32 new = bpf_ntohs(*(__u16 *)&ip->ttl);
				__u32 sum = (__u16)~bpf_ntohs(ip->check) + (__u16)~old + new;
				sum = (sum & 0xffff) + (sum >> 16);
				sum = (sum & 0xffff) + (sum >> 16);
				ip->check = bpf_htons(~sum & 0xffff);
			} else {
				struct ipv6hdr *ip6 = data + l3;
				if ((void *)(ip6 + 1) > end)
					goto fail;
				ip6->hop_limit = a->ttl;
			}
		}
	}
	if ((a->flags & XVS_NAT) && nat_rewrite(ctx, l3, a))
		goto fail;
	if (a->flags & XVS_ENCAP) {
		__u32 inner = ctx->data_end - ctx->data;
		__u32 hl = a->encap_len;
		__u32 uo = a->encap_udp;
		void *data, *end;
		__u16 *d;
		__u16 id = c ? (__u16)c->packets : 0;
		__u32 i, tot, sum;

		if (hl < 38 || hl > XVS_ENCAP_MAX || (hl & 1) || (uo && (uo < 34 || uo + 8 > hl)))
			goto fail;
		if (bpf_xdp_adjust_head(ctx, -(int)hl))
			goto fail;
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		d = data;
		for (i = 0; i < XVS_ENCAP_MAX / 2; i++) {
			if (i * 2 >= hl)
				break;
			if ((void *)(d + i + 1) > end)
				goto fail;
			d[i] = *(__u16 *)&a->hdr[i * 2];
		}
		{
			struct iphdr *ip = data + 14;
			if ((void *)(ip + 1) > end)
				goto fail;
			/* DF is set (userspace offers only such tunnels), so any
			 * identification will do (RFC 6864): the entry's packet
			 * count on this CPU. */
			tot = inner + hl - 14;
			ip->tot_len = bpf_htons(tot);
			ip->id = bpf_htons(id);
			sum = a->encap_sum + tot + id;
			sum = (sum & 0xffff) + (sum >> 16);
			sum = (sum & 0xffff) + (sum >> 16);
			ip->check = bpf_htons(~sum & 0xffff);
		}
		if (uo) {
			__u16 *udp;
			uo &= 0x7f;
			udp = data + uo;
			if ((void *)(udp + 4) > end)
				goto fail;
			udp[2] = bpf_htons(inner + hl - uo);
		}
	}
	fstat(0);
	return bpf_redirect_map(&xvs_tx, a->out_ifindex, XDP_DROP);
leave:
	/* To userspace as the frame came: a decapsulated one gets its outer
	 * headers back (nothing has been written yet, so their bytes are
	 * still in front of the inner frame). */
	if (popped && bpf_xdp_adjust_head(ctx, -popped))
		goto fail;
	return -1;
fail:
	/* Committed to the fast path and the frame may be half rewritten:
	 * drop it rather than hand a damaged frame to userspace. */
	fstat(4);
	return XDP_DROP;
}

SEC("xdp")
int xvs_xsk_redirect(struct xdp_md *ctx)
{
	int r = fast_path(ctx);
	if (r >= 0)
		return r;
	return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

// Same program for devices with multi-buffer frames (MTU above a page);
// the AF_XDP socket must then be bound with XDP_USE_SG.
SEC("xdp.frags")
int xvs_xsk_redirect_frags(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

// Benchmark sink: count every frame (packets, bytes) and drop it, so a
// receiving namespace costs its sender almost nothing.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} xvs_counters SEC(".maps");

SEC("xdp")
int xvs_count_drop(struct xdp_md *ctx)
{
	__u32 k = 0;
	__u64 *n = bpf_map_lookup_elem(&xvs_counters, &k);
	if (n)
		*n += 1;
	k = 1;
	__u64 *b = bpf_map_lookup_elem(&xvs_counters, &k);
	if (b)
		*b += ctx->data_end - ctx->data;
	return XDP_DROP;
}

// Benchmark generator, run unattached with BPF_PROG_TEST_RUN in live-frames
// mode (BPF_F_TEST_XDP_LIVE_FRAMES, kernel >= 5.18): the kernel hands the
// program one page-pool frame per repetition, initialised from data_in, and
// really transmits what it redirects. The program overwrites the frame's
// first bytes with the next template (round robin over xvs_gen_frames, so
// one frame in a page-pool slot can carry any flow) and redirects it to the
// configured device; into a veth whose peer runs XDP this costs no skb, so
// one core offers several times what a packet socket can.
#define XVS_GEN_HDR 256

struct xvs_gen_frame {
	__u8 b[XVS_GEN_HDR];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);	/* userspace sets it to the template count */
	__type(key, __u32);
	__type(value, struct xvs_gen_frame);
} xvs_gen_frames SEC(".maps");

struct xvs_gen_conf {
	__u32 ifindex;		/* where frames go */
	__u32 nframes;		/* templates in xvs_gen_frames */
	__u32 copy;		/* bytes of each template to copy, a multiple of 8 */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xvs_gen_conf);
} xvs_gen_conf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} xvs_gen_next SEC(".maps");

SEC("xdp")
int xvs_pktgen(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct xvs_gen_conf *c = bpf_map_lookup_elem(&xvs_gen_conf, &k);
	if (!c)
		return XDP_ABORTED;
	if (c->nframes > 1) {
		__u64 *next = bpf_map_lookup_elem(&xvs_gen_next, &k);
		if (!next)
			return XDP_ABORTED;
		__u32 i = *next % c->nframes;
		*next += 1;
		struct xvs_gen_frame *f = bpf_map_lookup_elem(&xvs_gen_frames, &i);
		if (!f)
			return XDP_ABORTED;
		__u8 *data = (void *)(long)ctx->data;
		__u8 *end = (void *)(long)ctx->data_end;
		__u32 copy = c->copy;
#pragma unroll
		for (int w = 0; w < XVS_GEN_HDR / 8; w++) {
			if (w * 8 >= copy || data + w * 8 + 8 > end)
				break;
			*(__u64 *)(data + w * 8) = *(__u64 *)(f->b + w * 8);
		}
	}
	return bpf_redirect(c->ifindex, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
