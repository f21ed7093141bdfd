/**
 * One GPU: its share bar (this kernel's part solid, other kernels' hatched, what is reserved
 * dotted), live use, and who holds it, one line each. Draws an `IGpuBar` (../model/gpus).
 *
 * Every string from the kernel is a React text node or an attribute value, never markup.
 */

import * as React from 'react';

import { IGpuBar } from '../model/gpus';

/** Who holds a GPU, one line each, under its bar; a line that does not fit ends in "…". */
export function HolderList(props: { bar: IGpuBar }): JSX.Element | null {
  const { bar } = props;
  if (!bar.holders.length) {
    return null;
  }
  return (
    <ul className="jp-sched-holders" aria-label={`Holders of ${bar.node} ${bar.label}`}>
      {bar.holders.map((holder, i) => (
        <li
          key={`${holder.kind}-${holder.pid ?? 'mine'}-${i}`}
          className="jp-sched-holder"
          data-holder={holder.kind}
          data-pid={holder.pid ?? undefined}
          data-share={holder.share ?? undefined}
          title={holder.title}
        >
          <span className="jp-sched-holder-share">{holder.shareText}</span>{' '}
          <span className="jp-sched-holder-text">{holder.text}</span>
        </li>
      ))}
      {bar.moreHolders > 0 ? (
        <li className="jp-sched-holder jp-sched-more" data-holder="more">
          and {bar.moreHolders} more
        </li>
      ) : null}
    </ul>
  );
}

/**
 * One GPU: the share allocated as a bar, live use beside it where NVML gives it, and who
 * holds it. This kernel's part of the bar is solid; other kernels' part is hatched, and what
 * is reserved for other kernels' waits (or used outside the scheduler) is dotted, so the
 * three differ without colour too.
 */
export function GpuBar(props: { bar: IGpuBar }): JSX.Element {
  const { bar } = props;
  const percent = (share: number) => `${Math.round(share * 1000) / 10}%`;
  const label = `${bar.node} ${bar.label}${bar.model ? ` (${bar.model})` : ''}`;
  return (
    <div
      className="jp-sched-gpu-bar"
      data-node={bar.node}
      data-device={bar.index}
      data-share={bar.share}
      data-others={bar.others}
      data-declared={bar.declared ? 'true' : 'false'}
      title={`${label}: ${bar.text}`}
    >
      <span className="jp-sched-gpu-label">{bar.label}</span>
      <span
        className="jp-sched-gpu-track"
        role="meter"
        aria-label={`${label} allocated`}
        aria-valuemin={0}
        aria-valuemax={1}
        aria-valuenow={bar.share}
        aria-valuetext={bar.meterText}
      >
        {bar.segments.map(part => (
          <span
            key={part.kind}
            className="jp-sched-gpu-fill"
            data-holder={part.kind}
            title={part.title}
            style={{ left: percent(part.from), width: percent(part.width) }}
          />
        ))}
        {bar.utilization !== null ? (
          <span
            className="jp-sched-gpu-use"
            style={{ width: `${Math.min(100, Math.max(0, bar.utilization))}%` }}
          />
        ) : null}
      </span>
      <span className="jp-sched-gpu-text">{bar.text}</span>
      {bar.declared ? <span className="jp-sched-declared">declared</span> : null}
      <HolderList bar={bar} />
    </div>
  );
}
