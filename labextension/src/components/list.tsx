/**
 * A windowed list: however many items it has, it draws the rows in view (plus a few), so
 * thousands of tasks cost a screenful of elements. Rows have one fixed height.
 */

import * as React from 'react';

export interface IVirtualListProps<T> {
  items: ReadonlyArray<T>;
  rowHeight: number;
  /** The list's height at most, in pixels; longer lists scroll and draw only what shows. */
  maxHeight: number;
  label: string;
  itemKey: (item: T) => string;
  renderItem: (item: T) => JSX.Element;
  overscan?: number;
}

/** A list that draws the rows in view (plus a few), however many items it has. */
export function VirtualList<T>(props: IVirtualListProps<T>): JSX.Element {
  const { items, rowHeight, maxHeight } = props;
  const [scrollTop, setScrollTop] = React.useState(0);
  const total = items.length * rowHeight;
  const height = Math.min(total, maxHeight);
  const overscan = props.overscan ?? 5;
  const first = Math.max(0, Math.floor(scrollTop / rowHeight) - overscan);
  const last = Math.min(items.length, Math.ceil((scrollTop + height) / rowHeight) + overscan);
  const rows: JSX.Element[] = [];
  for (let i = first; i < last; i++) {
    const item = items[i];
    rows.push(
      <div
        key={props.itemKey(item)}
        role="listitem"
        className="jp-sched-list-item"
        style={{ top: i * rowHeight, height: rowHeight }}
      >
        {props.renderItem(item)}
      </div>
    );
  }
  return (
    <div
      className="jp-sched-list"
      role="list"
      aria-label={props.label}
      data-count={items.length}
      style={{ height, maxHeight }}
      onScroll={event => setScrollTop(event.currentTarget.scrollTop)}
    >
      <div className="jp-sched-list-inner" style={{ height: total }}>
        {rows}
      </div>
    </div>
  );
}
