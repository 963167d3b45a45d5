//! The vhost-user device model: features offered to the frontend, and the
//! hand-over of the vrings to the polling port.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::{ShutdownHandle, VhostUserBackend, VringRwLock};
use virtio_bindings::virtio_config::{VIRTIO_F_IN_ORDER, VIRTIO_F_VERSION_1};
use virtio_bindings::virtio_net::{VIRTIO_NET_F_MQ, VIRTIO_NET_F_MRG_RXBUF};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier};

/// State shared between the message loop and the polling port.
#[derive(Default)]
pub(crate) struct Shared {
    pub connected: AtomicBool,
    pub connects: AtomicU64,
    /// Memory tables the frontend sent: the port maps guest memory again
    /// when this moves, and otherwise keeps its map without looking.
    pub mem_gen: AtomicU64,
    /// Memory tables the frontends sent, over all connections.
    pub mem_tables: AtomicU64,
    /// Events (guest kicks) the message loop delivered.
    pub kicks: AtomicU64,
    /// The frontend accepted `VIRTIO_NET_F_MRG_RXBUF`: a frame to it may
    /// span several receive buffers. Without it, each must fit one.
    pub mrg_rxbuf: AtomicBool,
    /// Every virtio feature bit the frontend accepted.
    pub acked: AtomicU64,
    /// Messages the relay answered itself (see `proxy`).
    pub relay_answered: std::sync::Arc<AtomicU64>,
    /// The device's vrings, known from the first event the loop delivers.
    pub vrings: Mutex<Vec<VringRwLock>>,
    pub shutdown: Mutex<Option<ShutdownHandle>>,
    pub last_error: Mutex<String>,
}

#[derive(Clone)]
pub(crate) struct NetBackend {
    shared: std::sync::Arc<Shared>,
}

impl NetBackend {
    pub fn new(shared: std::sync::Arc<Shared>) -> Self {
        NetBackend { shared }
    }
}

impl VhostUserBackend for NetBackend {
    type Bitmap = ();
    type Vring = VringRwLock;

    /// Queue pairs (receive 2i, transmit 2i+1) the frontend may use; it
    /// enables as many as it wants (VHOST_USER_GET_QUEUE_NUM tells it
    /// the most).
    fn num_queues(&self) -> usize {
        2 * crate::MAX_QUEUE_PAIRS
    }

    fn max_queue_size(&self) -> usize {
        1024
    }

    /// `VIRTIO_F_IN_ORDER`: the port uses every queue's buffers in the
    /// order they were made available (it takes chains from the available
    /// ring in order, returns each one, used or dropped, in that order, and
    /// gives back untouched the ones a frame did not fit), which is all the
    /// feature asks of a device. A driver that accepts it may take faster
    /// paths: DPDK's virtio driver then recycles descriptors in ring order.
    fn features(&self) -> u64 {
        (1 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_F_IN_ORDER)
            | (1 << VIRTIO_NET_F_MRG_RXBUF)
            | (1 << VIRTIO_NET_F_MQ)
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::REPLY_ACK | VhostUserProtocolFeatures::MQ
    }

    fn acked_features(&self, features: u64) {
        let mrg = features & (1 << VIRTIO_NET_F_MRG_RXBUF) != 0;
        self.shared.acked.store(features, std::sync::atomic::Ordering::Release);
        self.shared.mrg_rxbuf.store(mrg, std::sync::atomic::Ordering::Release);
    }

    fn set_event_idx(&self, _enabled: bool) {}

    /// Lets the device's event thread end when the connection's device is
    /// dropped (without it, dropping would wait forever).
    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        new_event_consumer_and_notifier(EventFlag::NONBLOCK).ok()
    }

    /// Called after each new memory table is in place (set, region added
    /// or removed): the port maps it before its next batch.
    fn update_memory(&self, _mem: GuestMemoryAtomic<GuestMemoryMmap<()>>) -> std::io::Result<()> {
        self.shared.mem_tables.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.shared.mem_gen.fetch_add(1, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// A kick: the port polls, so the only use of an event is to learn the
    /// vrings (delivered with every event).
    fn handle_event(
        &self,
        _device_event: u16,
        _evset: EventSet,
        vrings: &[VringRwLock],
        _thread_id: usize,
    ) -> std::io::Result<()> {
        self.shared.kicks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut v = self.shared.vrings.lock().unwrap();
        if v.len() != vrings.len() {
            *v = vrings.to_vec();
        }
        Ok(())
    }
}
