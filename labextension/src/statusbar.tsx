/**
 * The status-bar item: `GPU 1.5/2 · 2 running · 3 queued` for the followed kernel; a click
 * opens the Scheduler sidebar. Shown only while that kernel's scheduler answers, so kernels
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
import { statusBarText } from './model';

export function StatusText(props: { text: string; onClick: () => void }): JSX.Element {
  return (
    <button
      type="button"
      className="jp-sched-statusbar-button"
      title="Show the Scheduler sidebar"
      aria-label={`Scheduler: ${props.text}. Show the Scheduler sidebar`}
      onClick={props.onClick}
    >
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

  get text(): string {
    const snapshot = this._connection.snapshot;
    return snapshot ? statusBarText(snapshot) : '';
  }

  dispose(): void {
    this._connection.changed.disconnect(this._onChanged, this);
    super.dispose();
  }

  protected render(): JSX.Element {
    return <StatusText text={this.text} onClick={this._onClick} />;
  }

  private _onChanged(): void {
    if (this.isActive() === this.isHidden) {
      this._activeStateChanged.emit();
    }
    const text = this.text;
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
