/**
 * The plugins: the Scheduler sidebar with its status-bar item and commands, following the
 * active notebook's or console's kernel; and the renderer of the display payload, which reads
 * the state of tasks now from the same connection to that kernel.
 */

import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IConsoleTracker } from '@jupyterlab/console';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { IRunningSessionManagers } from '@jupyterlab/running';
import { Kernel } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { SchedConnection } from './comm';
import { followActiveKernel } from './follow';
import { HostPoller } from './hostpoll';
import { findCell, showCell } from './jump';
import { startNotifications } from './notify';
import { createRendererFactory, RENDERER_RANK } from './renderer';
import { cancelTask } from './cancel';
import { addLeasesSection } from './running';
import { schedulerIcon, SchedulerSidebar } from './sidebar';
import { SchedulerStatus } from './statusbar';
import { addTopItem } from './topbar';
import { startWaitNotices } from './waitnotice';

/** The command ids. */
namespace CommandIDs {
  /** Show the Scheduler sidebar and bring it to the front. */
  export const show = 'jupyter-sched:show';
  /** Ask the followed kernel for a full snapshot now. */
  export const refresh = 'jupyter-sched:refresh';
}

const PLUGIN_ID = 'jupyter-sched:plugin';

/** Where the sidebar sits among the other side panels. */
const SIDEBAR_RANK = 800;

const sidebarPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'The Scheduler sidebar and status-bar item, following the active kernel.',
  autoStart: true,
  optional: [
    INotebookTracker,
    IConsoleTracker,
    ILabShell,
    ILayoutRestorer,
    ISettingRegistry,
    IStatusBar,
    ICommandPalette,
    IRunningSessionManagers
  ],
  activate: (
    app: JupyterFrontEnd,
    notebooks: INotebookTracker | null,
    consoles: IConsoleTracker | null,
    labShell: ILabShell | null,
    restorer: ILayoutRestorer | null,
    settingRegistry: ISettingRegistry | null,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null,
    running: IRunningSessionManagers | null
  ): void => {
    const settings = { ...Private.DEFAULTS };
    const connection = Private.connection();
    const onJump = notebooks
      ? (cell: string) => Private.jump(app, notebooks, connection.kernelId, cell)
      : undefined;
    // the whole host, from the server (no kernel needed): the sidebar's "This host" and the
    // Running panel's "GPU leases"
    const host = new HostPoller(app.serviceManager.serverSettings);
    const sidebar = new SchedulerSidebar({
      connection,
      timelineWindow: settings.timelineWindow,
      onJump,
      host
    });
    if (running) {
      // the page's connections to kernels (only those handle comms)
      const kernels = () => {
        const found: Kernel.IKernelConnection[] = [];
        for (const tracker of [notebooks, consoles]) {
          tracker?.forEach(widget => {
            const kernel = widget.sessionContext.session?.kernel;
            if (kernel) {
              found.push(kernel);
            }
          });
        }
        return found;
      };
      addLeasesSection(
        running,
        host,
        schedulerIcon,
        () =>
          Array.from(app.shell.widgets('left')).some(
            w => w.id === 'jp-running-sessions' && w.isVisible
          ),
        {
          cancelTask: (kernel, task) => cancelTask(kernels(), kernel, task),
          shutdownKernel: kernel => host.shutdownKernel(kernel)
        }
      );
    }
    app.shell.add(sidebar, settings.sidebarSide, { rank: SIDEBAR_RANK });
    restorer?.add(sidebar, sidebar.id);

    app.commands.addCommand(CommandIDs.show, {
      label: 'Show Scheduler',
      caption: 'Show the Scheduler sidebar of the active kernel',
      icon: args => (args['isPalette'] ? undefined : schedulerIcon),
      execute: () => app.shell.activateById(sidebar.id)
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Scheduler',
      caption: 'Ask the active kernel for a full scheduler snapshot',
      isEnabled: () => connection.state === 'live',
      execute: () => connection.send({ command: 'snapshot' }).then(() => undefined)
    });
    palette?.addItem({ command: CommandIDs.show, category: 'Scheduler' });
    palette?.addItem({ command: CommandIDs.refresh, category: 'Scheduler' });

    if (statusBar) {
      const item = new SchedulerStatus(connection, () => {
        void app.commands.execute(CommandIDs.show);
      });
      statusBar.registerStatusItem(`${PLUGIN_ID}-status`, {
        item,
        align: 'left',
        rank: 4,
        isActive: () => item.isActive(),
        activeStateChanged: item.activeStateChanged
      });
    } else {
      // Notebook 7 has no status bar: the item goes to the top area, on the title's row
      addTopItem(app.shell, connection, () => void app.commands.execute(CommandIDs.show));
    }

    followActiveKernel(connection, [notebooks, consoles], labShell);

    if (settingRegistry) {
      const apply = (loaded: ISettingRegistry.ISettings) => {
        const next = Private.read(loaded);
        connection.subscribe({ interval: next.refreshRate, window: next.timelineWindow });
        sidebar.timelineWindow = next.timelineWindow;
        if (next.sidebarSide !== settings.sidebarSide) {
          // adding it to the other side moves it there
          app.shell.add(sidebar, next.sidebarSide, { rank: SIDEBAR_RANK });
        }
        Object.assign(settings, next);
      };
      settingRegistry
        .load(PLUGIN_ID)
        .then(loaded => {
          apply(loaded);
          loaded.changed.connect(apply);
        })
        .catch(reason =>
          console.error(`jupyter_sched: could not load settings of ${PLUGIN_ID}`, reason)
        );
    }
  }
};

const rendererPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-sched:renderer',
  description: 'Draws jupyter_sched display payloads (application/vnd.jupyter-sched.v1+json).',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  activate: (app: JupyterFrontEnd, rendermime: IRenderMimeRegistry): void => {
    rendermime.addFactory(createRendererFactory(Private.connection()), RENDERER_RANK);
  }
};

const notifyPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-sched:notify',
  description:
    'Notifications of tasks that end and notices, in notebooks not on show, and of ' +
    "notebooks' kernels waiting for their GPU.",
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ILabShell, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    notebooks: INotebookTracker,
    labShell: ILabShell | null,
    settingRegistry: ISettingRegistry | null
  ): void => {
    startNotifications(app, notebooks, labShell, settingRegistry, PLUGIN_ID, () => {
      void app.commands.execute(CommandIDs.show);
    });
    startWaitNotices(new HostPoller(app.serviceManager.serverSettings), notebooks);
  }
};

export default [sidebarPlugin, rendererPlugin, notifyPlugin];

namespace Private {
  export interface ISettings {
    refreshRate: number;
    sidebarSide: 'left' | 'right';
    timelineWindow: number;
  }

  export const DEFAULTS: ISettings = { refreshRate: 0.5, sidebarSide: 'left', timelineWindow: 300 };

  let shared: SchedConnection | null = null;

  /** The one connection to the followed kernel, made by the first plugin that needs it. */
  export function connection(): SchedConnection {
    shared ??= new SchedConnection({
      interval: DEFAULTS.refreshRate,
      window: DEFAULTS.timelineWindow
    });
    return shared;
  }

  /** Show the cell `cell` of the notebook of kernel `kernelId`, if it has that cell. */
  export function jump(
    app: JupyterFrontEnd,
    notebooks: INotebookTracker,
    kernelId: string | null,
    cell: string
  ): void {
    const panels: NotebookPanel[] = [];
    notebooks.forEach(panel => panels.push(panel));
    const found = findCell(panels, kernelId, cell);
    if (found) {
      showCell(found, id => app.shell.activateById(id)).catch(reason =>
        console.warn('jupyter_sched: could not show the cell', reason)
      );
    }
  }

  /** The settings, with values out of range brought back in (the schema says the same). */
  export function read(settings: ISettingRegistry.ISettings): ISettings {
    const rate = Number(settings.get('refreshRate').composite);
    const window = Number(settings.get('timelineWindow').composite);
    const side = settings.get('sidebarSide').composite;
    return {
      refreshRate: Number.isFinite(rate) ? Math.max(0.25, rate) : DEFAULTS.refreshRate,
      sidebarSide: side === 'right' ? 'right' : 'left',
      timelineWindow: Number.isFinite(window) && window > 0 ? window : DEFAULTS.timelineWindow
    };
  }
}
