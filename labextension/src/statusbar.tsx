/**
 * The status-bar item: `GPU 1.5/2 · 2 running · 3 queued` for the followed kernel; a click
 * opens the Scheduler sidebar. Shown only while that kernel's scheduler answers, so kernels
 * without the extension leave the status bar as it was.
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
    const active = this.isActive();
    if (active !== this._wasActive) {
      this._wasActive = active;
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
  private _wasActive = false;
  private _lastText = '';
}
