/**
 * "GPU leases" in JupyterLab's Running panel: every lease of the host (the server extension's
 * host view). Where the kernel that holds it is one of this server's (the user's own), a
 * button cancels the task that holds it (`cancel.ts`), or, for a whole kernel's lease, shuts
 * the kernel down. Fetched while the Running panel is shown.
 */

import { showErrorMessage } from '@jupyterlab/apputils';
import { IRunningSessionManagers, IRunningSessions } from '@jupyterlab/running';
import { LabIcon, ToolbarButton } from '@jupyterlab/ui-components';

import { HostPoller } from './hostpoll';
import { IHostLeaseRow } from './model/host';

/** The text of a lease's row and its tooltip (pure, so it is tested without a page). */
export function leaseLabel(lease: IHostLeaseRow): { label: string; title: string } {
  const label =
    `${lease.shareText} of ${lease.device} · ${lease.user} · ${lease.notebook}` +
    ` · ${lease.activity}`;
  const title =
    `${lease.user} holds ${lease.shareText} of ${lease.device} for ${lease.task} ` +
    `(${lease.notebook}, enforced: ${lease.enforced}) ${lease.sinceText}; ${lease.activity}` +
    (lease.own
      ? lease.taskId
        ? `. A task of a kernel of this server: cancelling it gives the lease back.`
        : '. A kernel of this server: shutting it down gives the lease back.'
      : '');
  return { label, title };
}

/** The kernels "Shut Down Mine" shuts down: this server's, holding a lease; none, no button. */
export function ownKernels(leases: readonly IHostLeaseRow[]): string[] {
  return [...new Set(leases.filter(l => l.own && l.kernel).map(l => l.kernel as string))];
}

/** What the buttons do: cancel a task of a kernel, shut a kernel down. */
export interface ILeaseActions {
  cancelTask(kernel: string, task: string): Promise<void>;
  shutdownKernel(kernel: string): Promise<void>;
}

class LeaseItem implements IRunningSessions.IRunningItem {
  constructor(
    private _lease: IHostLeaseRow,
    private _poller: HostPoller,
    private _icon: LabIcon,
    actions: ILeaseActions
  ) {
    const { kernel, taskId } = _lease;
    if (_lease.own && kernel) {
      this.action = taskId ? `Cancel Task ${taskId}` : 'Shut Down Kernel';
      const act = taskId
        ? () => actions.cancelTask(kernel, taskId)
        : () => actions.shutdownKernel(kernel);
      this.shutdown = () =>
        act()
          .catch(error => showErrorMessage(this.action, error))
          .finally(() => this._poller.refresh());
    }
  }

  /** What its button does, in words ('' for none). */
  action = '';
  className = 'jp-sched-lease-item';
  shutdown?: () => Promise<void>;

  icon(): LabIcon {
    return this._icon;
  }

  label(): string {
    return leaseLabel(this._lease).label;
  }

  labelTitle(): string {
    return leaseLabel(this._lease).title;
  }
}

/** How often whether the Running panel is shown is looked at. */
const LOOK_MS = 1000;

/**
 * Add the "GPU leases" section; `shown()` says whether the Running panel is on the screen
 * (the host view is fetched only then). Returns what stops looking.
 */
export function addLeasesSection(
  managers: IRunningSessionManagers,
  poller: HostPoller,
  icon: LabIcon,
  shown: () => boolean,
  actions: ILeaseActions
): () => void {
  const holder = {};
  // (the section's own "Shut Down Mine" button shows only while one of the leases is the
  // user's: a hidden button of ours finds it in the section's toolbar)
  const probe = new ToolbarButton({ className: 'jp-sched-leases-probe' });
  probe.node.style.display = 'none';
  const showMine = () => {
    // (its class is on the inner button; the toolbar item around it is what goes)
    const inner = probe.node.parentElement?.querySelector<HTMLElement>(
      '.jp-RunningSessions-shutdownAll'
    );
    const button = inner?.closest<HTMLElement>('.jp-Toolbar-item') ?? inner;
    if (button) {
      button.style.display = ownKernels(poller.view?.leases ?? []).length ? '' : 'none';
    }
  };
  poller.changed.connect(showMine);
  const looking = setInterval(() => {
    if (shown()) {
      poller.hold(holder);
      showMine();
    } else {
      poller.release(holder);
    }
  }, LOOK_MS);
  managers.add({
    name: 'GPU leases',
    running: () => (poller.view?.leases ?? []).map(l => new LeaseItem(l, poller, icon, actions)),
    shutdownLabel: (item: IRunningSessions.IRunningItem) =>
      item instanceof LeaseItem ? item.action : 'Shut Down',
    shutdownAll: async () => {
      for (const kernel of ownKernels(poller.view?.leases ?? [])) {
        await actions.shutdownKernel(kernel);
      }
    },
    refreshRunning: () => poller.refresh(),
    runningChanged: poller.changed,
    shutdownAllLabel: 'Shut Down Mine',
    toolbarButtons: [probe],
    shutdownAllConfirmationText:
      'Shut down every kernel of this server that holds a GPU lease? Their leases are given back.'
  });
  return () => {
    clearInterval(looking);
    poller.changed.disconnect(showMine);
    poller.release(holder);
  };
}
