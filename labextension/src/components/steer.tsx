/**
 * A waiting task's Run next and Hold (or Release) buttons, which send `top`, `hold` and
 * `release` for the task's id, and give the focus back to the button pressed when the next
 * snapshot redraws its row.
 *
 * Every string from the kernel is a React text node or an attribute value, never markup.
 */

import * as React from 'react';

import { ITaskRow } from '../model/tasks';
import { SteerCommand } from '../schema';

interface ISteering {
  /** The button's text. */
  text: string;
  /** Its accessible name, for task `label`: "Run task t7 train next". */
  name: (label: string) => string;
  /** What it does, in words, for its tooltip. */
  title: (label: string) => string;
}

const STEERING: { [command in SteerCommand]: ISteering } = {
  top: {
    text: 'Run next',
    name: label => `Run task ${label} next`,
    title: label => `Run task ${label} next: first in its queue`
  },
  hold: {
    text: 'Hold',
    name: label => `Hold task ${label}`,
    title: label => `Hold task ${label}: it waits and is not started until released`
  },
  release: {
    text: 'Release',
    name: label => `Release task ${label}`,
    title: label => `Release task ${label}: it waits in its queue again`
  }
};

/** How long after a click a steering button takes back the focus its row's redraw lost. */
const REFOCUS_MS = 5000;

/**
 * A waiting task's Run next and Hold (or Release) buttons. Hold and Release are one button,
 * so the focus stays on it when the task's state changes; if the next snapshot moves the row
 * and the focus is lost (to the page's body), the button last pressed takes it back.
 */
export function SteerButtons(props: {
  task: ITaskRow;
  onSteer: (command: SteerCommand, task: string) => void;
}): JSX.Element | null {
  const { task, onSteer } = props;
  const buttons = React.useRef<(HTMLButtonElement | null)[]>([]);
  // the button last pressed, the task as it was then, and until when it may take the focus
  const pressed = React.useRef<{ slot: number; was: string; until: number } | null>(null);
  const now = `${task.state} ${task.position}`;
  React.useLayoutEffect(() => {
    const last = pressed.current;
    const button = last ? buttons.current[last.slot] : null;
    if (!last || !button || Date.now() > last.until) {
      pressed.current = null;
      return;
    }
    const active = button.ownerDocument.activeElement;
    if (active === button && now === last.was) {
      return; // a redraw before the snapshot that changes the task
    }
    if (active === null || active === button.ownerDocument.body) {
      button.focus();
    }
    pressed.current = null; // given back once, or the user has moved on
  });
  if (!task.steer.length) {
    return null;
  }
  return (
    <>
      {task.steer.map((command, slot) => (
        <button
          // the slot, not the command: Hold becomes Release in the same element
          key={slot}
          ref={element => {
            buttons.current[slot] = element;
          }}
          type="button"
          className={`jp-sched-steer jp-sched-${command} jp-mod-styled`}
          data-command={command}
          aria-label={STEERING[command].name(task.label)}
          title={STEERING[command].title(task.label)}
          onClick={() => {
            pressed.current = { slot, was: now, until: Date.now() + REFOCUS_MS };
            onSteer(command, task.id);
          }}
        >
          {STEERING[command].text}
        </button>
      ))}
    </>
  );
}
