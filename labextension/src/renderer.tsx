/**
 * The renderer for `application/vnd.jupyter-sched.v1+json` (docs/schema.md): every kind drawn
 * with the sidebar's components. A payload of another version or kind, or one this code cannot
 * draw, shows a line saying so and the bundle's `text/plain`.
 */

import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { ReactWidget } from '@jupyterlab/ui-components';
import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { NodeList, QueueTable, StateBadge, TaskList } from './components';
import {
  formatDuration,
  nodeRow,
  queueRow,
  sidebarView,
  statusBarText,
  taskRow,
  taskRows
} from './model';
import { Counts, IStatusPayload, ITaskView, MIME_TYPE, Payload, readPayload } from './schema';

/** Below the HTML renderer's 50, so this one is preferred for bundles that carry both. */
export const RENDERER_RANK = 0;

function Fallback(props: { problem: string; text: string }): JSX.Element {
  return (
    <div className="jp-sched-fallback">
      <p className="jp-sched-fallback-note">{props.problem}</p>
      {props.text ? <pre className="jp-sched-fallback-text">{props.text}</pre> : null}
    </div>
  );
}

/** Counts in a fixed order, zeros left out: "2 running · 3 queued · 1 infeasible". */
function countsText(counts: Counts | undefined, states: string[]): string {
  return states
    .filter(s => (counts?.[s] ?? 0) > 0)
    .map(s => `${counts?.[s]} ${s}`)
    .join(' · ');
}

function TaskCard(props: { task: ITaskView; error: string | null }): JSX.Element {
  const row = taskRow(props.task, null, props.error);
  const { task } = props;
  const took = task.started !== null && task.ended !== null ? task.ended - task.started : null;
  return (
    <div className="jp-sched-task-card jp-sched-task" data-task-id={row.id} data-state={row.state}>
      <div className="jp-sched-task-line">
        <StateBadge state={row.state} />
        <span className="jp-sched-task-label">{row.label}</span>
        {took !== null ? <span className="jp-sched-elapsed">{formatDuration(took)}</span> : null}
      </div>
      <div className="jp-sched-task-detail">{row.stateText}</div>
      <div className="jp-sched-task-detail">
        needs {row.needs} · queue {row.queue}
        {task.gang ? ` · gang ${task.gang} rank ${task.rank ?? '?'}` : ''}
      </div>
      {props.error ? <pre className="jp-sched-task-error">{props.error}</pre> : null}
    </div>
  );
}

function StatusView(props: { status: IStatusPayload }): JSX.Element {
  const view = sidebarView(props.status);
  return (
    <>
      <div className="jp-sched-summary">{statusBarText(props.status)}</div>
      <NodeList nodes={view.nodes} />
      <TaskList
        tasks={view.running.rows}
        more={view.running.more}
        label="Running tasks"
        empty="Nothing running."
      />
      <TaskList
        tasks={view.waiting.rows}
        more={view.waiting.more}
        label="Waiting tasks"
        empty="Nothing waiting."
      />
      <QueueTable queues={view.queues} />
    </>
  );
}

function KindView(props: { payload: Payload }): JSX.Element {
  const p = props.payload;
  switch (p.kind) {
    case 'task':
      return <TaskCard task={p.task} error={p.error} />;
    case 'gang': {
      const tasks = p.tasks ?? [];
      return (
        <>
          <div className="jp-sched-summary">
            gang {p.name}: {tasks.length} member{tasks.length === 1 ? '' : 's'}
          </div>
          {p.error ? <pre className="jp-sched-task-error">{p.error}</pre> : null}
          <TaskList
            tasks={taskRows(tasks, null)}
            more={0}
            label={`Members of gang ${p.name}`}
            empty="No members."
          />
        </>
      );
    }
    case 'status':
      return <StatusView status={p} />;
    case 'nodes':
      return <NodeList nodes={(p.nodes ?? []).map(nodeRow)} />;
    case 'queue': {
      const view = sidebarView({
        ...p,
        kind: 'status',
        gpu: { allocated: 0, total: 0 },
        nodes: [],
        queues: []
      });
      return (
        <>
          <div className="jp-sched-summary">
            {countsText(p.counts, ['running', 'stopping', 'pending', 'queued', 'infeasible']) ||
              'No tasks.'}
          </div>
          <TaskList
            tasks={view.running.rows}
            more={view.running.more}
            label="Running tasks"
            empty="Nothing running."
          />
          <TaskList
            tasks={view.waiting.rows}
            more={view.waiting.more}
            label="Waiting tasks"
            empty="Nothing waiting."
          />
        </>
      );
    }
    case 'history': {
      const rows = taskRows(p.history ?? [], null);
      const total = ['done', 'failed', 'cancelled'].reduce((n, s) => n + (p.counts?.[s] ?? 0), 0);
      return (
        <>
          <div className="jp-sched-summary">
            {countsText(p.counts, ['done', 'failed', 'cancelled']) || 'No history.'}
          </div>
          <TaskList
            tasks={rows}
            more={Math.max(0, total - rows.length)}
            label="Finished tasks"
            empty="No finished tasks."
          />
        </>
      );
    }
    case 'queues':
      return <QueueTable queues={(p.queues ?? []).map(queueRow)} />;
  }
}

/** Drawing a payload with fields of unexpected types throws; then the plain text shows. */
class Guard extends React.Component<
  { text: string; children: React.ReactNode },
  { failed: string | null }
> {
  state = { failed: null as string | null };

  static getDerivedStateFromError(error: Error): { failed: string } {
    return { failed: String(error?.message ?? error) };
  }

  render(): React.ReactNode {
    if (this.state.failed !== null) {
      return (
        <Fallback
          problem={`This jupyter_sched payload could not be drawn (${this.state.failed}); showing the plain text`}
          text={this.props.text}
        />
      );
    }
    return this.props.children;
  }
}

/** A payload, or the plain text with a line saying why the payload is not drawn. */
export function PayloadView(props: { data: unknown; text: string }): JSX.Element {
  const payload = readPayload(props.data);
  if ('problem' in payload) {
    return <Fallback problem={payload.problem} text={props.text} />;
  }
  return (
    <div className="jp-sched-payload" data-kind={payload.kind}>
      <Guard text={props.text}>
        <KindView payload={payload} />
      </Guard>
    </div>
  );
}

/** The renderer widget JupyterLab puts in an output area. */
export class RenderedSched extends ReactWidget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this.addClass('jp-sched-rendered');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this._data = model.data[this._mimeType];
    const text = model.data['text/plain'];
    this._text = typeof text === 'string' ? text : Array.isArray(text) ? text.join('') : '';
    MessageLoop.sendMessage(this, Widget.Msg.UpdateRequest);
    await this.renderPromise;
  }

  protected render(): JSX.Element {
    return <PayloadView data={this._data} text={this._text} />;
  }

  private _mimeType: string;
  private _data: unknown = null;
  private _text = '';
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME_TYPE],
  defaultRank: RENDERER_RANK,
  createRenderer: options => new RenderedSched(options)
};
