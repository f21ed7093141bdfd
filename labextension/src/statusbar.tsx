/**
 * The status-bar item: `GPU 1.5/2 · 2 running · 3 queued` for the followed kernel, with
 * `others 0.5` and `1 unmanaged` when other kernels or processes without a lease use its GPUs,
 * after a ⚠ while a notice waits to be dismissed in the sidebar; a click opens the sidebar. Shown only while that kernel's scheduler answers, so kernels
 * without the extension leave the status bar as it was.
 *
 * JupyterLab's status bar shows or hides an item in two cases: when the item's
 * `activeStateChanged` fires, and on every change of the shell's layout (switching tabs,
 * opening a panel), when it asks `isActive()` of every item. Switching notebooks is such a
 * change, and it comes while the new kernel's first snapshot is on its way, so the item is
 * hidden then; it must say so again once that snapshot arrives, even though `isActive()` was
 * true before the switch too. So the item compares `isActive()` with whether it is shown,
 * not with what `isActive()` last returned.
 */

import { ReactWidget } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import * as React from 'react';

import { SchedConnection } from './comm';
import { IStatusItemView, statusItemView } from './model/summary';

/** The item: the figures, after a ⚠ in the warning colour while a notice waits. */
export function StatusText(props: {
  text: string;
  onClick: () => void;
  /** "⚠" while a notice waits to be dismissed in the sidebar. */
  marker?: string;
  /** Notices not dismissed. */
  notices?: number;
  title?: string;
}): JSX.Element {
  const title = props.title ?? `Scheduler: ${props.text}. Show the Scheduler sidebar`;
  return (
    <button
      type="button"
      className="jp-sched-statusbar-button"
      data-notices={props.notices || undefined}
      title={title}
      aria-label={title}
      onClick={props.onClick}
    >
      {props.marker ? (
        <>
          <span className="jp-sched-statusbar-marker" aria-hidden="true">
            {props.marker}
          </span>{' '}
        </>
      ) : null}
      {props.text}
    </button>
  );
}

export class SchedulerStatus extends ReactWidget {
  constructor(connection: SchedConnection, onClick: () => void) {
    super();
    this._connection = connection;
    this._onClick = onClick;
    this.addClass('jp-sched-statusbar');
    connection.changed.connect(this._onChanged, this);
  }

  /** For the status bar: emitted when the item should show or hide. */
  get activeStateChanged(): ISignal<this, void> {
    return this._activeStateChanged;
  }

  isActive(): boolean {
    return this._connection.state === 'live' && this._connection.snapshot !== null;
  }

  get view(): IStatusItemView {
    const snapshot = this._connection.snapshot;
    return snapshot
      ? statusItemView(snapshot, this._connection.dismissed)
      : { text: '', marker: '', summary: '', notices: 0, title: '' };
  }

  get text(): string {
    return this.view.text;
  }

  dispose(): void {
    this._connection.changed.disconnect(this._onChanged, this);
    super.dispose();
  }

  protected render(): JSX.Element {
    const view = this.view;
    return (
      <StatusText
        text={view.summary}
        marker={view.marker}
        notices={view.notices}
        title={view.title}
        onClick={this._onClick}
      />
    );
  }

  private _onChanged(): void {
    if (this.isActive() === this.isHidden) {
      this._activeStateChanged.emit();
    }
    const view = this.view;
    const text = `${view.text}\n${view.title}`;
    if (text !== this._lastText) {
      this._lastText = text;
      this.update();
    }
  }

  private _connection: SchedConnection;
  private _onClick: () => void;
  private _activeStateChanged = new Signal<this, void>(this);
  private _lastText = '';
}
