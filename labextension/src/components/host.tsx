/**
 * The sidebar's "This host": every GPU of the host with the share held, the leases (who, which
 * notebook and task, how long, idle or at work), the waits in the host's order and who holds
 * what they wait for, each user's fair-share standing and the GPU processes no lease accounts
 * for. Draws an `IHostViewModel` (../model/host); every string is a text node.
 */

import * as React from 'react';

import { IHostViewModel } from '../model/host';

export function HostView(props: {
  view: IHostViewModel | null;
  error: string | null;
}): JSX.Element {
  const { view, error } = props;
  if (!view) {
    return (
      <p className="jp-sched-message jp-sched-host-message">
        {error ?? 'Asking the server about this host…'}
      </p>
    );
  }
  return (
    <div className="jp-sched-host">
      <div className="jp-sched-host-summary">{view.summary}</div>
      {error || view.error ? (
        <p className="jp-sched-error" role="alert">
          {error ?? view.error}
        </p>
      ) : null}
      {view.gpus.length ? (
        <ul className="jp-sched-host-gpus" aria-label="GPUs of this host">
          {view.gpus.map(gpu => (
            <li key={gpu.key} className="jp-sched-host-gpu" data-gpu={gpu.key} title={gpu.title}>
              <span className="jp-sched-host-gpu-name">{gpu.name}</span>{' '}
              <meter min={0} max={1} value={gpu.held} aria-label={`${gpu.name} held`} />{' '}
              <span className="jp-sched-host-gpu-held">{gpu.heldText}</span>
              {gpu.reading ? (
                <span className="jp-sched-host-gpu-reading"> · {gpu.reading}</span>
              ) : null}
            </li>
          ))}
        </ul>
      ) : (
        <p className="jp-sched-message">No GPUs seen on this host.</p>
      )}
      {view.leases.length ? (
        <ul className="jp-sched-host-leases" aria-label="Leases on this host">
          {view.leases.map(lease => {
            // each line is cut to the sidebar's width; its tooltip has all of it
            const first = `${lease.shareText} of ${lease.device} · enforced ${lease.enforced} · `;
            const second = `${lease.user} · ${lease.notebook} · ${lease.task} · ${lease.sinceText}`;
            return (
              <li
                key={lease.id}
                className="jp-sched-host-lease"
                data-lease={lease.id}
                data-kernel={lease.kernel ?? undefined}
                data-idle={lease.idle ? 'true' : 'false'}
                data-ended={lease.ended ? 'true' : 'false'}
              >
                <div className="jp-sched-host-lease-line" title={first + lease.activity}>
                  {first}
                  <span className="jp-sched-host-activity">{lease.activity}</span>
                </div>
                <div className="jp-sched-host-lease-line" title={second}>
                  {second}
                </div>
              </li>
            );
          })}
        </ul>
      ) : (
        <p className="jp-sched-message">No leases: every GPU is free.</p>
      )}
      {view.waits.length ? (
        <ol className="jp-sched-host-waits" aria-label="Waits, in the host's order">
          {view.waits.map(wait => (
            <li key={wait.position} className="jp-sched-host-wait">
              {wait.user} ({wait.notebook}, {wait.task}) waits for {wait.what} {wait.sinceText}
              {wait.heldBy ? `; ${wait.heldBy}` : ''}
            </li>
          ))}
        </ol>
      ) : null}
      {view.users.length ? (
        <ul className="jp-sched-host-users" aria-label="Fair share between users">
          {view.users.map(u => (
            <li key={u.user}>
              {u.user}: {u.text}
            </li>
          ))}
        </ul>
      ) : null}
      {view.outside.length ? (
        <ul className="jp-sched-host-outside" aria-label="GPU processes holding no lease">
          {view.outside.map(text => (
            <li key={text}>unmanaged: {text}</li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}
