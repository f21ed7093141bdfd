/**
 * The status-bar item where there is no status bar: Notebook 7 has none, so the item goes to
 * its top area, after the bar that holds the notebook's title (Notebook 7 ranks its logo 0 and
 * that bar 900 there). It shows and hides itself as it would in the status bar: only while the
 * followed kernel's scheduler answers.
 */

import type { JupyterFrontEnd } from '@jupyterlab/application';

import { SchedConnection } from './comm';
import { SchedulerStatus } from './statusbar';

/** After Notebook 7's top bar: its title, save indicator and kernel logo. */
export const TOP_RANK = 1000;

export function addTopItem(
  shell: JupyterFrontEnd.IShell,
  connection: SchedConnection,
  onClick: () => void
): SchedulerStatus {
  const item = new SchedulerStatus(connection, onClick);
  item.id = 'jupyter-sched-top';
  item.addClass('jp-sched-top');
  const showOrHide = () => item.setHidden(!item.isActive());
  item.activeStateChanged.connect(showOrHide);
  showOrHide();
  shell.add(item, 'top', { rank: TOP_RANK });
  return item;
}
