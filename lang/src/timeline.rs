//! Device work on a timeline (docs/language.md §7.8): a cell's code and every timed command on
//! the host's clock, lane by lane — the host, and each submission — for `:timeline`; and the
//! session's trace since the last `:trace FILE`, written as Chrome's trace-event JSON, which
//! Perfetto and chrome://tracing open.

use std::time::{Duration, Instant};

use crate::timing::{DeviceTiming, Lane, Phase, PhaseTimes};

/// The spans of a cell's work, from the start of its code (or of the earliest command that ran
/// into it, for a submission made by an earlier cell).
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Host code first, then device work in the order it was recorded.
    pub spans: Vec<TimelineSpan>,
    /// From the timeline's start to the end of its last span.
    pub length: Duration,
}

/// One span of a timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineSpan {
    /// Where it ran.
    pub lane: Lane,
    /// `code` (the cell's host code), `kernel NAME`, `h2d`, `d2h`, `d2d`, `submit`, `await`…
    pub label: String,
    /// From the timeline's start.
    pub start: Duration,
    /// How long it took.
    pub duration: Duration,
    /// Bytes moved, when known.
    pub bytes: Option<u64>,
    /// What else its timing row says (geometry, GB/s).
    pub detail: String,
}

/// What a span is, for drawing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// The cell's host code.
    Code,
    /// A kernel.
    Kernel,
    /// A copy.
    Copy,
    /// The host waiting or handing work over: `submit`, `await`, a module load.
    Host,
}

impl TimelineSpan {
    /// What it is, from its label.
    pub fn kind(&self) -> SpanKind {
        match self.label.as_str() {
            "code" => SpanKind::Code,
            "h2d" | "d2h" | "d2d" => SpanKind::Copy,
            label if label.starts_with("kernel ") => SpanKind::Kernel,
            _ => SpanKind::Host,
        }
    }

    /// Its end, from the timeline's start.
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }
}

impl Lane {
    /// The lane's name: `host`, `submission 3`.
    pub fn name(&self) -> String {
        match self {
            Lane::Host => "host".into(),
            Lane::Submission(id) => format!("submission {id}"),
        }
    }
}

impl Timeline {
    /// The timeline of a cell from its timing; `None` if its code did not run.
    pub(crate) fn of(timing: &PhaseTimes) -> Option<Timeline> {
        let started = timing.started?;
        let run = timing.phases.iter().find(|(phase, _)| *phase == Phase::Run).map(|(_, duration)| *duration)?;
        let rows: Vec<(&DeviceTiming, Instant)> =
            timing.device.iter().filter_map(|row| row.start.map(|start| (row, start))).collect();
        let origin = rows.iter().map(|(_, start)| *start).chain([started]).min().unwrap_or(started);
        let mut spans = vec![TimelineSpan {
            lane: Lane::Host,
            label: "code".into(),
            start: started - origin,
            duration: run,
            bytes: None,
            detail: String::new(),
        }];
        spans.extend(rows.into_iter().map(|(row, start)| TimelineSpan {
            lane: row.lane,
            label: row.label.clone(),
            start: start - origin,
            duration: row.duration,
            bytes: row.bytes,
            detail: row.detail.clone(),
        }));
        let length = spans.iter().map(TimelineSpan::end).max().unwrap_or_default();
        Some(Timeline { spans, length })
    }

    /// Its lanes: the host's, then each submission's in order.
    pub fn lanes(&self) -> Vec<Lane> {
        let mut lanes: Vec<Lane> = self.spans.iter().map(|span| span.lane).collect();
        lanes.sort();
        lanes.dedup();
        lanes
    }
}

/// One span of the session's trace.
struct TraceEvent {
    lane: Lane,
    name: String,
    start: Instant,
    duration: Duration,
    bytes: Option<u64>,
    detail: String,
}

/// The most events a trace keeps between two `:trace` commands (the oldest go first).
const TRACE_EVENTS: usize = 1 << 20;

/// The session's device work since the last `:trace`: each cell's code and timed rows.
#[derive(Default)]
pub(crate) struct Trace {
    events: std::collections::VecDeque<TraceEvent>,
    dropped: usize,
}

impl Trace {
    /// Adds a cell's code (named `cell`) and its timed device work.
    pub(crate) fn record(&mut self, cell: &str, timing: &PhaseTimes) {
        let run = timing.phases.iter().find(|(phase, _)| *phase == Phase::Run).map(|(_, duration)| *duration);
        if let (Some(start), Some(duration)) = (timing.started, run) {
            let code = TraceEvent {
                lane: Lane::Host,
                name: cell.to_string(),
                start,
                duration,
                bytes: None,
                detail: String::new(),
            };
            self.push(code);
        }
        for row in &timing.device {
            if let Some(start) = row.start {
                let event = TraceEvent {
                    lane: row.lane,
                    name: row.label.clone(),
                    start,
                    duration: row.duration,
                    bytes: row.bytes,
                    detail: row.detail.clone(),
                };
                self.push(event);
            }
        }
    }

    fn push(&mut self, event: TraceEvent) {
        if self.events.len() == TRACE_EVENTS {
            self.events.pop_front();
            self.dropped += 1;
        }
        self.events.push_back(event);
    }

    /// The events as Chrome trace-event JSON — one process for the session, a thread per lane
    /// (`tid` 0 the host, N submission N), complete events (`ph` `X`) with `ts` and `dur` in
    /// µs from the first event — and how many events it holds; the trace starts over.
    pub(crate) fn take_json(&mut self) -> (String, usize) {
        let events = std::mem::take(&mut self.events);
        let dropped = std::mem::take(&mut self.dropped);
        let origin = events.iter().map(|event| event.start).min();
        let mut lanes: Vec<Lane> = events.iter().map(|event| event.lane).collect();
        lanes.sort();
        lanes.dedup();
        let tid = |lane: Lane| match lane {
            Lane::Host => 0,
            Lane::Submission(id) => id,
        };
        let mut json = vec![serde_json::json!({
            "name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": { "name": "quasi session" }
        })];
        for lane in lanes {
            json.push(serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": 1, "tid": tid(lane), "args": { "name": lane.name() }
            }));
            json.push(serde_json::json!({
                "name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid(lane), "args": { "sort_index": tid(lane) }
            }));
        }
        let micros = |duration: Duration| duration.as_nanos() as f64 / 1e3;
        for event in &events {
            let mut args = serde_json::Map::new();
            if let Some(bytes) = event.bytes {
                args.insert("bytes".into(), bytes.into());
            }
            if !event.detail.is_empty() {
                args.insert("detail".into(), event.detail.clone().into());
            }
            let category = match event.lane {
                Lane::Host if event.name.starts_with("cell ") => "code",
                Lane::Host => "host",
                Lane::Submission(_) => "device",
            };
            json.push(serde_json::json!({
                "name": event.name,
                "cat": category,
                "ph": "X",
                "ts": micros(event.start - origin.unwrap_or(event.start)),
                "dur": micros(event.duration),
                "pid": 1,
                "tid": tid(event.lane),
                "args": args,
            }));
        }
        let mut document = serde_json::json!({ "traceEvents": json, "displayTimeUnit": "ms" });
        if dropped > 0 {
            document["otherData"] = serde_json::json!({ "dropped_events": dropped });
        }
        (document.to_string(), events.len())
    }
}
