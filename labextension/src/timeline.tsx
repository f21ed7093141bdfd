/**
 * The timeline: a Gantt chart of who held which share of which GPU over the last `window`
 * seconds. One row per GPU of each node; a bar per task holding a share, as tall as the share,
 * stacked so that tasks sharing a GPU at the same time never overlap. The layout is a pure
 * function (tested without a DOM); the drawing is SVG rectangles with the labels as HTML text.
 */

import * as React from 'react';

import { formatDuration, formatNumber } from './model/format';
import { ITimelineEntry } from './schema';

/** Bars drawn at most: the newest are kept. */
export const MAX_BARS = 2000;

export interface ITimelineBar {
  task: string;
  name: string;
  state: string;
  share: number;
  /** Left edge and width as fractions of the window (0 to 1). */
  x: number;
  width: number;
  /** Top edge and height as fractions of the row (0 to 1): height is the share. */
  y: number;
  height: number;
  /** Still held at the window's end. */
  open: boolean;
  title: string;
}

export interface ITimelineRow {
  key: string;
  node: string;
  device: number;
  label: string;
  bars: ITimelineBar[];
}

export interface ITimelineLayout {
  /** The window's ends on the scheduler's clock. */
  start: number;
  end: number;
  window: number;
  rows: ITimelineRow[];
  /** Bars left out to stay within MAX_BARS. */
  dropped: number;
}

interface INodeDevices {
  name: string;
  devices?: ReadonlyArray<{ index: number }>;
}

const EPS = 1e-9;

function rowKey(node: string, device: number): string {
  return `${node}\u0000${device}`;
}

/**
 * The rows of the chart: every GPU of `nodes` in their order, then any GPU the entries name
 * that is gone now (a node that left) — so a past holder is never silently dropped.
 */
function rowsFor(nodes: ReadonlyArray<INodeDevices>, entries: ReadonlyArray<ITimelineEntry>) {
  const rows = new Map<string, ITimelineRow>();
  const add = (node: string, device: number) => {
    const key = rowKey(node, device);
    if (!rows.has(key)) {
      rows.set(key, { key, node, device, label: `${node} · GPU ${device}`, bars: [] });
    }
  };
  for (const node of nodes) {
    for (const d of node.devices ?? []) {
      add(node.name, d.index);
    }
  }
  for (const e of entries) {
    add(e.node, e.device);
  }
  return rows;
}

/** Lowest offset in [0, 1 - share] where `share` fits beside the bars still active. */
function laneFor(active: ReadonlyArray<{ y: number; height: number }>, share: number): number {
  const candidates = [0, ...active.map(a => a.y + a.height)].sort((a, b) => a - b);
  for (const y of candidates) {
    const fits = active.every(a => y + share <= a.y + EPS || y >= a.y + a.height - EPS);
    if (fits && y + share <= 1 + EPS) {
      return y;
    }
  }
  // more than the whole device over the window (a clock skew, a late release): overlap
  return Math.max(0, 1 - share);
}

export function layoutTimeline(
  entries: ReadonlyArray<ITimelineEntry>,
  window: number,
  now: number,
  nodes: ReadonlyArray<INodeDevices> = [],
  maxBars: number = MAX_BARS
): ITimelineLayout {
  const span = window > 0 ? window : 300;
  const start = now - span;
  const visible = entries
    .filter(e => (e.end ?? now) > start && e.start < now && e.share > 0)
    .sort((a, b) => a.start - b.start);
  const kept = visible.slice(Math.max(0, visible.length - maxBars));
  const rows = rowsFor(nodes, kept);
  const active = new Map<string, { end: number; y: number; height: number }[]>();
  for (const e of kept) {
    const key = rowKey(e.node, e.device);
    const row = rows.get(key) as ITimelineRow;
    const from = Math.max(e.start, start);
    const to = Math.min(e.end ?? now, now);
    const height = Math.min(1, e.share);
    const live = (active.get(key) ?? []).filter(a => a.end > e.start + EPS);
    const y = laneFor(live, height);
    live.push({ end: e.end ?? Infinity, y, height });
    active.set(key, live);
    const held = e.end === null ? 'still held' : `held ${formatDuration(e.end - e.start)}`;
    row.bars.push({
      task: e.task,
      name: e.name,
      state: e.state,
      share: e.share,
      x: (from - start) / span,
      width: Math.max(0, (to - from) / span),
      y,
      height,
      open: e.end === null,
      title: `${e.task} ${e.name} · GPU ${formatNumber(e.share)} · ${e.state} · ${held}`
    });
  }
  return {
    start,
    end: now,
    window: span,
    rows: [...rows.values()],
    dropped: visible.length - kept.length
  };
}

// -- drawing ------------------------------------------------------------------------------------

const TRACK_WIDTH = 1000;
const TRACK_HEIGHT = 100;

function Track(props: { row: ITimelineRow }): JSX.Element {
  return (
    <svg
      className="jp-sched-timeline-track"
      viewBox={`0 0 ${TRACK_WIDTH} ${TRACK_HEIGHT}`}
      preserveAspectRatio="none"
      aria-hidden="true"
    >
      {props.row.bars.map((bar, i) => (
        <rect
          key={`${bar.task}-${i}`}
          className="jp-sched-timeline-bar"
          data-task-id={bar.task}
          data-state={bar.state}
          data-share={bar.share}
          x={bar.x * TRACK_WIDTH}
          y={bar.y * TRACK_HEIGHT}
          width={Math.max(bar.width * TRACK_WIDTH, 1.5)}
          height={bar.height * TRACK_HEIGHT}
        >
          <title>{bar.title}</title>
        </rect>
      ))}
    </svg>
  );
}

/** The chart; `layout` comes from `layoutTimeline`. */
export function Timeline(props: { layout: ITimelineLayout }): JSX.Element {
  const { layout } = props;
  if (!layout.rows.length) {
    return <div className="jp-sched-empty">No GPUs.</div>;
  }
  const bars = layout.rows.reduce((n, r) => n + r.bars.length, 0);
  const summary = `GPU timeline of the last ${formatDuration(layout.window)}: ${bars} holding${bars === 1 ? '' : 's'} on ${layout.rows.length} GPU${layout.rows.length === 1 ? '' : 's'}`;
  return (
    <div className="jp-sched-timeline" role="figure" aria-label={summary}>
      {layout.rows.map(row => (
        <div
          key={row.key}
          className="jp-sched-timeline-row"
          data-node={row.node}
          data-device={row.device}
        >
          <span className="jp-sched-timeline-label" title={row.label}>
            {row.label}
          </span>
          <Track row={row} />
        </div>
      ))}
      <div className="jp-sched-timeline-axis" aria-hidden="true">
        <span>−{formatDuration(layout.window)}</span>
        <span>now</span>
      </div>
      {layout.dropped > 0 ? (
        <div className="jp-sched-more">{layout.dropped} older holdings not drawn</div>
      ) : null}
    </div>
  );
}
