/**
 * The nodes: a card each, with what is free, its labels, a bar per GPU and, where a kernel can
 * be told, a Drain or Undrain button. Draws `INodeRow`s (../model/nodes).
 *
 * Every string from the kernel is a React text node or an attribute value, never markup.
 */

import * as React from 'react';

import { INodeRow } from '../model/nodes';
import { GpuBar } from './gpus';

export interface INodeActions {
  onDrain?: (node: string, on: boolean) => void;
}

export function NodeCard(props: { node: INodeRow } & INodeActions): JSX.Element {
  const { node, onDrain } = props;
  return (
    <div
      className="jp-sched-node"
      data-node={node.name}
      data-drained={node.drained ? 'true' : 'false'}
    >
      <div className="jp-sched-node-head">
        <span className="jp-sched-node-name" title={node.name}>
          {node.name}
        </span>
        <span className="jp-sched-node-kind">{node.kind}</span>
        <span className="jp-sched-node-state" data-state={node.stateText}>
          {node.stateText}
        </span>
        <span className="jp-sched-node-running">{node.running} running</span>
        {onDrain ? (
          <button
            type="button"
            className="jp-sched-drain jp-mod-styled"
            aria-label={`${node.drained ? 'Undrain' : 'Drain'} node ${node.name}`}
            onClick={() => onDrain(node.name, !node.drained)}
          >
            {node.drained ? 'Undrain' : 'Drain'}
          </button>
        ) : null}
      </div>
      {node.freeParts.length ? (
        <div className="jp-sched-node-free" title={node.freeText}>
          {node.freeParts.map((part, i) => (
            // a line breaks between the parts, never inside one ("memory 8 GiB/8 GiB free")
            <React.Fragment key={i}>
              {i ? ' · ' : null}
              <span className="jp-sched-node-free-part">{part}</span>
            </React.Fragment>
          ))}
        </div>
      ) : null}
      {node.labelsText ? (
        <div className="jp-sched-node-labels" title={node.labelsTitle || node.labelsText}>
          {node.labelsText}
        </div>
      ) : null}
      {node.gpus.map(bar => (
        <GpuBar key={bar.index} bar={bar} />
      ))}
    </div>
  );
}

export function NodeList(props: { nodes: INodeRow[] } & INodeActions): JSX.Element {
  if (!props.nodes.length) {
    return <div className="jp-sched-empty">No nodes.</div>;
  }
  return (
    <div className="jp-sched-nodes">
      {props.nodes.map(node => (
        <NodeCard key={node.name} node={node} onDrain={props.onDrain} />
      ))}
    </div>
  );
}
