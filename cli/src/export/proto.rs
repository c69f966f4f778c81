//! The few protobuf wire-format pieces a Perfetto `Trace` needs, written by hand: a call
//! trace uses a dozen fields of four messages, and the hot path (one packet per record) is
//! cheaper as straight byte pushes than through a generated message type.
//!
//! Field numbers are Perfetto's (`protos/perfetto/trace/…`, checked against PyPI's
//! `perfetto` 0.59.1 `perfetto_trace_pb2`); see /work/shared/docs/perfetto-trace-format.md.

/// `Trace.packet`.
pub const TRACE_PACKET: u32 = 1;

/// `TracePacket` fields.
pub mod packet {
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TIMESTAMP: u32 = 8;
    /// Serialized `Trace` packets, zlib-compressed (what traced writes with
    /// `compression_type: COMPRESSION_TYPE_DEFLATE`).
    pub const COMPRESSED_PACKETS: u32 = 50;
    pub const SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const DEFAULTS: u32 = 59;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    pub const TRACE_ATTRIBUTES: u32 = 126;
    /// `sequence_flags`: the sequence's incremental state starts here.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
    /// `sequence_flags`: the packet uses interned data or incremental timestamps.
    pub const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
}

/// `TracePacketDefaults` and its `TrackEventDefaults`.
pub mod defaults {
    pub const TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const TRACK_EVENT_DEFAULTS: u32 = 11;
    pub const TRACK_UUID: u32 = 11;
}

/// `ClockSnapshot` and its `Clock`.
pub mod clock {
    pub const CLOCKS: u32 = 1;
    pub const CLOCK_ID: u32 = 1;
    pub const TIMESTAMP: u32 = 2;
    pub const IS_INCREMENTAL: u32 = 3;
    pub const UNIT_MULTIPLIER_NS: u32 = 4;
    /// `BUILTIN_CLOCK_BOOTTIME`, a proto trace's default timeline.
    pub const BOOTTIME: u64 = 6;
    /// The first sequence-scoped (user-defined) clock id.
    pub const CUSTOM: u64 = 64;
}

/// `TrackDescriptor`, `ProcessDescriptor`, `ThreadDescriptor`.
pub mod track {
    pub const UUID: u32 = 1;
    pub const NAME: u32 = 2;
    pub const PROCESS: u32 = 3;
    pub const THREAD: u32 = 4;
    pub const DESCRIPTION: u32 = 14;
    pub const PROCESS_PID: u32 = 1;
    pub const PROCESS_NAME: u32 = 6;
    pub const THREAD_PID: u32 = 1;
    pub const THREAD_TID: u32 = 2;
    pub const THREAD_NAME: u32 = 5;
}

/// `TrackEvent` and `DebugAnnotation`.
pub mod event {
    pub const DEBUG_ANNOTATIONS: u32 = 4;
    pub const TYPE: u32 = 9;
    pub const NAME_IID: u32 = 10;
    pub const TRACK_UUID: u32 = 11;
    pub const NAME: u32 = 23;
    pub const SOURCE_LOCATION_IID: u32 = 34;
    pub const SLICE_BEGIN: u64 = 1;
    pub const SLICE_END: u64 = 2;
    pub const INSTANT: u64 = 3;
    pub const ANNOTATION_NAME: u32 = 10;
    pub const ANNOTATION_STRING: u32 = 6;
    pub const ANNOTATION_UINT: u32 = 3;
}

/// `InternedData.event_names` and `EventName`; `InternedData.source_locations` and
/// `SourceLocation`.
pub mod interned {
    pub const EVENT_NAMES: u32 = 2;
    pub const IID: u32 = 1;
    pub const NAME: u32 = 2;
    pub const SOURCE_LOCATIONS: u32 = 4;
    pub const FILE_NAME: u32 = 2;
    pub const FUNCTION_NAME: u32 = 3;
    pub const LINE_NUMBER: u32 = 4;
}

/// `TraceAttributes.attribute` and its key/value.
pub mod attributes {
    pub const ATTRIBUTE: u32 = 1;
    pub const KEY: u32 = 1;
    pub const STRING_VALUE: u32 = 3;
}

const VARINT: u32 = 0;
const LEN: u32 = 2;

/// A message under construction: fields appended in any order, nested messages built in a
/// `Msg` of their own and added with [`Msg::message`].
#[derive(Debug, Default, Clone)]
pub struct Msg {
    pub buf: Vec<u8>,
}

/// Appends `v` as a base-128 varint.
#[inline(always)]
pub fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline(always)]
fn put_tag(buf: &mut Vec<u8>, field: u32, wire: u32) {
    put_varint(buf, u64::from(field << 3 | wire));
}

impl Msg {
    pub fn new() -> Msg {
        Msg::default()
    }

    pub fn uint(&mut self, field: u32, v: u64) -> &mut Msg {
        put_tag(&mut self.buf, field, VARINT);
        put_varint(&mut self.buf, v);
        self
    }

    /// A signed `int32`/`int64` field (negative values take ten bytes, as protobuf says).
    pub fn int(&mut self, field: u32, v: i64) -> &mut Msg {
        self.uint(field, v as u64)
    }

    pub fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Msg {
        put_tag(&mut self.buf, field, LEN);
        put_varint(&mut self.buf, b.len() as u64);
        self.buf.extend_from_slice(b);
        self
    }

    pub fn string(&mut self, field: u32, s: &str) -> &mut Msg {
        self.bytes(field, s.as_bytes())
    }

    pub fn message(&mut self, field: u32, m: &Msg) -> &mut Msg {
        self.bytes(field, &m.buf)
    }
}

/// Appends one `Trace.packet` framing of `packet`'s bytes to `out`.
pub fn frame(out: &mut Vec<u8>, packet: &[u8]) {
    put_tag(out, TRACE_PACKET, LEN);
    put_varint(out, packet.len() as u64);
    out.extend_from_slice(packet);
}

/// The bytes before a `Trace.packet` holding only `compressed_packets` of `len` bytes: the
/// packet's framing and the field's tag and length (the compressed bytes follow).
pub fn bundle_header(len: usize) -> Vec<u8> {
    let mut field = Vec::with_capacity(8);
    put_tag(&mut field, packet::COMPRESSED_PACKETS, LEN);
    put_varint(&mut field, len as u64);
    let mut out = Vec::with_capacity(16);
    put_tag(&mut out, TRACE_PACKET, LEN);
    put_varint(&mut out, (field.len() + len) as u64);
    out.extend_from_slice(&field);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_as_protobuf_writes_them() {
        let mut b = Vec::new();
        put_varint(&mut b, 1);
        put_varint(&mut b, 300);
        put_varint(&mut b, u64::MAX);
        assert_eq!(
            b,
            [1, 0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
    }

    #[test]
    fn nested_message_and_frame() {
        let mut inner = Msg::new();
        inner.uint(1, 150);
        let mut outer = Msg::new();
        outer.message(3, &inner).string(2, "ab");
        assert_eq!(outer.buf, [0x1a, 3, 0x08, 0x96, 0x01, 0x12, 2, b'a', b'b']);
        let mut out = Vec::new();
        frame(&mut out, &outer.buf);
        assert_eq!(out[..2], [0x0a, 9]);
        // The tag of field 126 takes two bytes.
        let mut m = Msg::new();
        m.uint(packet::TRACE_ATTRIBUTES, 0);
        assert_eq!(m.buf, [0xf0, 0x07, 0]);
    }

    #[test]
    fn bundle_header_frames_a_compressed_packets_field() {
        // Field 50, length-delimited: tag 402 = 0x92 0x03; 300 bytes: 0xac 0x02.
        assert_eq!(
            bundle_header(300),
            [0x0a, 0xb0, 0x02, 0x92, 0x03, 0xac, 0x02]
        );
        let mut m = Msg::new();
        m.bytes(packet::COMPRESSED_PACKETS, &[7; 300]);
        let mut framed = Vec::new();
        frame(&mut framed, &m.buf);
        assert_eq!(framed[..7], bundle_header(300)[..]);
    }
}
