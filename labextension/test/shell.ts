/**
 * JupyterLab's shell and a notebook tracker, as `followActiveKernel` uses them: a user
 * clicking a tab is `shell.activate(panel)`, closing one is `panel.dispose()`.
 */

import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { FakeContext, FakeKernel } from './fakes';

/** A notebook panel: a widget with a session context. */
export class FakePanel extends Widget {
  constructor(name: string, kernel: FakeKernel | null = new FakeKernel()) {
    super();
    this.sessionContext = new FakeContext(kernel);
    this.sessionContext.name = name;
  }
  readonly sessionContext: FakeContext;
  get kernel(): FakeKernel {
    return this.sessionContext.session.kernel as FakeKernel;
  }
}

export class FakeTracker {
  currentWidget: Widget | null = null;
  currentChanged = new Signal<this, Widget | null>(this);
  widgetAdded = new Signal<this, Widget>(this);
  has(widget: Widget): boolean {
    return this._widgets.has(widget);
  }
  add(widget: Widget): void {
    this._widgets.add(widget);
    // as JupyterLab's trackers: they hear of a disposal before anyone who connected later
    widget.disposed.connect(() => {
      this._widgets.delete(widget);
      if (this.currentWidget === widget) {
        this.currentWidget = null;
        this.currentChanged.emit(null);
      }
    });
    this.widgetAdded.emit(widget);
  }
  private _widgets = new Set<Widget>();
}

export class FakeShell {
  constructor(readonly trackers: FakeTracker[] = []) {}
  currentWidget: Widget | null = null;
  currentChanged = new Signal<this, { oldValue: Widget | null; newValue: Widget | null }>(this);
  /** A tab becomes current: the shell says so, then the tracker that holds the widget. */
  activate(widget: Widget | null): void {
    const oldValue = this.currentWidget;
    this.currentWidget = widget;
    this.currentChanged.emit({ oldValue, newValue: widget });
    for (const tracker of this.trackers) {
      if (widget && tracker.has(widget) && tracker.currentWidget !== widget) {
        tracker.currentWidget = widget;
        tracker.currentChanged.emit(widget);
      }
    }
  }
}
