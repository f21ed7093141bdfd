/**
 * "GPU leases" in JupyterLab's Running panel: every lease of the host (the server extension's
 * host view), with a button to shut down the kernel that holds it where that kernel is one of
 * this server's, the user's own. Fetched while the Running panel is shown.
 */

import { IRunningSessionManagers, IRunningSessions } from '@jupyterlab/running';
import { LabIcon } from '@jupyterlab/ui-components';

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
    (lease.own ? '. A kernel of this server: shutting it down gives the lease back.' : '');
  return { label, title };
}

class LeaseItem implements IRunningSessions.IRunningItem {
  constructor(
    private _lease: IHostLeaseRow,
    private _poller: HostPoller,
    private _icon: LabIcon
  ) {
    if (_lease.own && _lease.kernel) {
      const kernel = _lease.kernel;
      this.shutdown = () => this._poller.shutdownKernel(kernel);
    }
  }

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
  shown: () => boolean
): () => void {
  const holder = {};
  const looking = setInterval(
    () => (shown() ? poller.hold(holder) : poller.release(holder)),
    LOOK_MS
  );
  managers.add({
    name: 'GPU leases',
    running: () => (poller.view?.leases ?? []).map(l => new LeaseItem(l, poller, icon)),
    shutdownAll: async () => {
      const own = new Set(
        (poller.view?.leases ?? []).filter(l => l.own && l.kernel).map(l => l.kernel as string)
      );
      for (const kernel of own) {
        await poller.shutdownKernel(kernel);
      }
    },
    refreshRunning: () => poller.refresh(),
    runningChanged: poller.changed,
    shutdownAllLabel: 'Shut Down Mine',
    shutdownAllConfirmationText:
      'Shut down every kernel of this server that holds a GPU lease? Their leases are given back.'
  });
  return () => {
    clearInterval(looking);
    poller.release(holder);
  };
}
