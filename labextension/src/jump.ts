/**
 * From a task to the notebook cell that submitted it (its `cell`, the id JupyterLab gives the
 * cell's model and sends with the execute request): the notebook whose session's kernel is the
 * one the sidebar follows and that has that cell is brought to the front, the cell made its
 * active cell, selected alone in command mode, and scrolled into view. A cell deleted since,
 * or a notebook closed, is not found: nothing moves.
 */

/** What of a notebook is used here (`Notebook` has it). */
export interface ICellList {
  readonly widgets: ReadonlyArray<{ readonly model: { readonly id: string } }>;
  activeCellIndex: number;
  mode: 'command' | 'edit';
  deselectAll(): void;
  scrollToItem(index: number, align?: 'auto' | 'smart' | 'center' | 'start' | 'end'): Promise<void>;
}

/** What of a notebook panel is used here (`NotebookPanel` has it). */
export interface ICellPanel {
  readonly id: string;
  readonly isDisposed: boolean;
  readonly sessionContext: {
    readonly session?: { readonly kernel?: { readonly id: string } | null } | null;
  };
  readonly content: ICellList;
}

export interface IFoundCell<P extends ICellPanel = ICellPanel> {
  panel: P;
  index: number;
}

/** The panel of kernel `kernelId` that has the cell `cellId`, and the cell's index; or null. */
export function findCell<P extends ICellPanel>(
  panels: Iterable<P>,
  kernelId: string | null,
  cellId: string
): IFoundCell<P> | null {
  if (!kernelId || !cellId) {
    return null;
  }
  for (const panel of panels) {
    if (panel.isDisposed || panel.sessionContext.session?.kernel?.id !== kernelId) {
      continue;
    }
    const index = panel.content.widgets.findIndex(cell => cell.model.id === cellId);
    if (index >= 0) {
      return { panel, index };
    }
  }
  return null;
}

/**
 * Show a found cell: its notebook activated (`activate`, the shell's `activateById`), the
 * cell the active one, alone selected, scrolled to the middle of the view.
 */
export async function showCell(found: IFoundCell, activate: (id: string) => void): Promise<void> {
  const notebook = found.panel.content;
  notebook.deselectAll();
  notebook.activeCellIndex = found.index;
  notebook.mode = 'command';
  activate(found.panel.id);
  await notebook.scrollToItem(found.index, 'center');
}
