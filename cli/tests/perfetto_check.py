"""Decodes a Perfetto trace with the official schema (PyPI's `perfetto` package and
`protobuf`) and prints what the export tests assert on, as JSON.

Usage: python perfetto_check.py TRACE[.gz]

Packets are read one at a time with the `Trace` framing (tag 0x0A, varint length), each
decoded as a `TracePacket`. A packet holding `compressed_packets` (a zlib or gzip stream of
framed packets, as traced writes with DEFLATE compression) is inflated and its packets read
in its place, with the checks Perfetto's trace processor makes (`ProtoTraceTokenizer`):
one whole stream with nothing after it, every packet inside framed as `Trace.packet`, and
no bundle inside a bundle (the reader would abort on one). Per sequence it follows what Perfetto's trace processor does:
incremental state cleared by sequence_flags, TracePacketDefaults (clock and track),
interned event names, and incremental sequence-scoped clocks (a packet's timestamp is a
delta from the previous one; the first after a ClockSnapshot is relative to its value).
"""

import collections
import gzip
import json
import sys
import zlib

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

BEGIN, END, INSTANT = 1, 2, 3
CLEARED = 1


def varint(data, pos):
    shift = value = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


BUNDLES = [0]


def inflate(blob):
    # zlib or gzip, as the trace processor's inflateInit2(32 + MAX_WBITS) takes it.
    d = zlib.decompressobj(32 + zlib.MAX_WBITS)
    out = d.decompress(blob)
    if not d.eof or d.unused_data:
        raise SystemExit("compressed_packets: not one whole zlib stream")
    return out


def packets(data):
    """The trace's packets, each bundle's in its place."""
    pos = 0
    while pos < len(data):
        tag, pos = varint(data, pos)
        if tag != 0x0A:
            raise SystemExit(f"byte {pos}: tag {tag:#x} is not Trace.packet")
        n, pos = varint(data, pos)
        if pos + n > len(data):
            raise SystemExit(f"byte {pos}: packet of {n} bytes runs past the end")
        p = pb.TracePacket.FromString(data[pos : pos + n])
        pos += n
        if p.WhichOneof("data") == "compressed_packets":
            BUNDLES[0] += 1
            yield from bundle(inflate(p.compressed_packets))
        else:
            yield p


def bundle(data):
    """A bundle's packets. It is parsed whole as a `Trace` (in C: a kernel boot's trace is
    millions of packets): a field of another number or wire type than `Trace.packet` is
    then an unknown field or a parse error, and a packet running past the end an error."""
    try:
        t = pb.Trace.FromString(data)
    except DecodeError as e:
        raise SystemExit(f"compressed_packets: not framed packets ({e})")
    if len(UnknownFieldSet(t)):
        raise SystemExit("compressed_packets: a field that is not Trace.packet")
    return t.packet


def thread_out(uuid, thread, tr):
    """A thread track's entry in the output: its descriptor and what its events left."""
    return dict(
        thread,
        uuid=uuid,
        slices=dict(tr.counts),
        begins=tr.begins,
        open_at_end=tr.stack,
        instants=tr.instants,
        last_ts=tr.last_ts,
        srclines=tr.srclines,
        values=tr.values,
    )


class Track:
    """What one track's events left: open slice names (and their begin's annotations),
    slice counts and each name's first and last begin time, instants, the last timestamp,
    source lines, and the annotations (-A/-R's args and retval) of each slice that has
    some, in the order the slices end."""

    __slots__ = ("stack", "open_notes", "counts", "begins", "instants", "last_ts",
                 "srclines", "values")

    def __init__(self, ts):
        self.stack = []
        self.open_notes = []
        self.counts = collections.Counter()
        self.begins = {}
        self.instants = []
        self.last_ts = ts
        self.srclines = {}
        self.values = []


def main():
    path = sys.argv[1]
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)

    processes = {}  # uuid -> {pid, name}
    threads = {}  # uuid -> {pid, tid, name}
    named_tracks = {}  # uuid -> {name, description}
    attributes = {}
    problems = []
    seq = collections.defaultdict(
        lambda: {"names": {}, "locs": {}, "clock": None, "track": None, "clocks": {},
                 "cleared": False}
    )
    # Per track (one dict lookup per event, the loop runs millions of times):
    tracks = {}
    clock_decl = []
    n_packets = 0

    for p in packets(data):
        n_packets += 1
        sid = p.trusted_packet_sequence_id
        st = seq[sid]
        if p.sequence_flags & CLEARED:
            st.update(names={}, locs={}, clock=None, track=None, clocks={}, cleared=True)
        if p.HasField("trace_packet_defaults"):
            d = p.trace_packet_defaults
            if d.HasField("timestamp_clock_id"):
                st["clock"] = d.timestamp_clock_id
            if d.track_event_defaults.HasField("track_uuid"):
                st["track"] = d.track_event_defaults.track_uuid
        if p.HasField("interned_data"):
            if not st["cleared"]:
                problems.append(f"sequence {sid}: interned data before its state was cleared")
            for en in p.interned_data.event_names:
                st["names"][en.iid] = en.name
            for sl in p.interned_data.source_locations:
                st["locs"][sl.iid] = f"{sl.file_name}:{sl.line_number}"
        kind = p.WhichOneof("data")
        if kind != "track_event":
            if kind == "compressed_packets":
                # The reader would abort on a bundle inside a bundle.
                raise SystemExit("compressed_packets inside compressed_packets")
            elif kind == "trace_attributes":
                for a in p.trace_attributes.attribute:
                    attributes[a.key] = a.string_value or a.long_value
            elif kind == "clock_snapshot":
                for c in p.clock_snapshot.clocks:
                    if c.clock_id >= 64:
                        st["clocks"][c.clock_id] = {
                            "value": c.timestamp,
                            "incremental": c.is_incremental,
                            "unit_multiplier_ns": c.unit_multiplier_ns or 1,
                            "fresh": True,
                        }
                        clock_decl.append(
                            {"seq": sid, "clock_id": c.clock_id,
                             "unit_multiplier_ns": c.unit_multiplier_ns,
                             "incremental": c.is_incremental}
                        )
            elif kind == "track_descriptor":
                td = p.track_descriptor
                if td.HasField("process"):
                    processes[td.uuid] = {"pid": td.process.pid, "name": td.process.process_name}
                elif td.HasField("thread"):
                    threads[td.uuid] = {
                        "pid": td.thread.pid,
                        "tid": td.thread.tid,
                        "name": td.thread.thread_name,
                    }
                else:
                    named_tracks[td.uuid] = {"name": td.name, "description": td.description}
            continue
        # The event's time on the trace's timeline.
        clock_id = p.timestamp_clock_id or st["clock"]
        if clock_id and clock_id >= 64:
            c = st["clocks"].get(clock_id)
            if c is None:
                problems.append(f"sequence {sid}: clock {clock_id} used before its snapshot")
                continue
            if c["incremental"]:
                c["value"] += p.timestamp
            else:
                c["value"] = p.timestamp
            ts = c["value"] * c["unit_multiplier_ns"]
        else:
            ts = p.timestamp
        te = p.track_event
        track = te.track_uuid if te.HasField("track_uuid") else st["track"]
        if track is None:
            problems.append(f"sequence {sid}: event without a track")
            continue
        tr = tracks.get(track)
        if tr is None:
            tr = tracks[track] = Track(ts)
        elif ts < tr.last_ts:
            problems.append(f"track {track}: time goes back from {tr.last_ts} to {ts}")
        tr.last_ts = ts
        if te.HasField("name_iid"):
            name = st["names"].get(te.name_iid)
            if name is None:
                problems.append(f"sequence {sid}: name_iid {te.name_iid} not interned")
                name = f"?{te.name_iid}"
        else:
            name = te.name
        if te.HasField("source_location_iid"):
            loc = st["locs"].get(te.source_location_iid)
            if loc is None:
                problems.append(f"sequence {sid}: source_location_iid not interned")
            else:
                tr.srclines[name] = loc
        annotations = te.debug_annotations
        notes = (
            {a.name: (a.string_value or a.uint_value) for a in annotations}
            if annotations
            else None
        )
        kind = te.type
        if kind == BEGIN:
            tr.stack.append(name)
            tr.counts[name] += 1
            first_last = tr.begins.get(name)
            if first_last is None:
                tr.begins[name] = [ts, ts]
            else:
                first_last[1] = ts
            tr.open_notes.append(notes)
        elif kind == END:
            if not tr.stack:
                problems.append(f"track {track}: slice end at {ts} with no slice open")
            else:
                began = tr.open_notes.pop()
                done = dict(began or (), name=tr.stack.pop())
                done.update(notes or ())
                if len(done) > 1:
                    tr.values.append(done)
        elif kind == INSTANT:
            tr.instants.append({"ts": ts, "name": name, "notes": notes or {}})

    empty = Track(None)
    out = {
        "packets": n_packets,
        "bundles": BUNDLES[0],
        "processes": [dict(v, uuid=k) for k, v in processes.items()],
        "threads": [thread_out(k, v, tracks.get(k, empty)) for k, v in threads.items()],
        "named_tracks": [
            dict(v, uuid=k, instants=tracks.get(k, empty).instants)
            for k, v in named_tracks.items()
        ],
        "attributes": attributes,
        "clocks": clock_decl,
        "problems": problems,
    }
    unknown = {k for k, tr in tracks.items() if tr.counts} - set(threads)
    if unknown:
        out["problems"].append(f"events on undeclared tracks {sorted(unknown)}")
    json.dump(out, sys.stdout)


main()
