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

SEC("xdp")
int xvs_xsk_redirect(struct xdp_md *ctx)
{
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

char LICENSE[] SEC("license") = "Dual BSD/GPL";
