// Running a command in a sandbox (POST /v1/sandboxes/{id}/exec): its output
// streams in as Server-Sent Events while it runs, then its exit code and
// whether it timed out, was cut or ran out of memory. Output reaches the
// page as text nodes only. The section lives on the sandbox page
// (sandbox.js).

import {api, apiEvents, errorText, ApiError} from '../api.js';
import {h, fill, badge, duration} from '../dom.js';

// outcome shows how a command ended: its exit code and flags.
export function outcome(res) {
  return [
    badge(`exit ${res.exit_code}`, res.exit_code === 0 ? 'ok' : 'bad'),
    res.timed_out ? badge(`timed out after ${res.timeout_seconds} s`, 'bad') : null,
    res.truncated ? badge('output truncated', 'warn') : null,
    res.oom_killed ? badge('out of memory', 'bad') : null,
  ].filter(Boolean).flatMap((b) => [b, ' ']);
}

// streamNotSupported is true of an error saying the provider runs commands
// but cannot stream them: the command is then run again, plainly.
const streamNotSupported = (err) => err?.code === 'NOT_SUPPORTED';

// execSection draws the section into box and returns update(sb, provider),
// which enables the form for a ready sandbox. onRan runs after each command
// (the page's activity shows it).
export function execSection(box, id, ctx, onRan) {
  const path = `/v1/sandboxes/${encodeURIComponent(id)}/exec`;
  const help = h('p', {class: 'help', id: 'exec-help'});
  const command = h('textarea', {id: 'exec-command', name: 'command', rows: '2', required: true, spellcheck: 'false', autocomplete: 'off', placeholder: 'ls -la', 'aria-describedby': 'exec-help'});
  const timeout = h('input', {id: 'exec-timeout', name: 'timeout_seconds', type: 'number', min: '0', step: '1', inputmode: 'numeric', placeholder: '60', 'aria-describedby': 'exec-timeout-help'});
  const run = h('button', {type: 'submit', id: 'exec-run', disabled: true}, 'Run');
  const stop = h('button', {type: 'button', class: 'secondary', id: 'exec-stop', hidden: true}, 'Stop');
  const status = h('p', {class: 'progress', role: 'status', id: 'exec-status'});
  const result = h('p', {class: 'exec-result', id: 'exec-result'});
  const error = h('p', {class: 'error', role: 'alert', id: 'exec-error'});
  const output = h('pre', {class: 'exec-output', id: 'exec-output', tabindex: '0', 'aria-label': 'Output', hidden: true});
  const form = h('form', {class: 'stack', 'aria-label': 'Run a command'},
    h('div', {class: 'field'}, h('label', {for: 'exec-command'}, 'Command (sh -c)'), command),
    h('div', {class: 'fields'},
      h('div', {class: 'field'}, h('label', {for: 'exec-timeout'}, 'Timeout (seconds)'), timeout,
        h('small', {class: 'help', id: 'exec-timeout-help'}, 'empty: 60; 0: the server’s maximum'))),
    h('div', {class: 'actions'}, run, stop));
  fill(box, help, form, status, error, result, output);

  let ready = false;
  let stopper = null;
  // Ctrl+Enter (or Cmd+Enter) in the command runs it.
  command.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      form.requestSubmit();
    }
  });
  stop.addEventListener('click', () => stopper?.abort());

  const append = (text, stream) => {
    output.hidden = false;
    const atEnd = output.scrollTop + output.clientHeight >= output.scrollHeight - 4;
    output.append(stream === 'stderr' ? h('span', {class: 'stderr'}, text) : document.createTextNode(text));
    if (atEnd) output.scrollTop = output.scrollHeight;
  };

  // execute runs req, streaming; it returns the ExecResult, or null when
  // the stream ended without one, and throws the problem of an error event.
  // A provider that cannot stream runs it plainly.
  async function execute(req, signal) {
    let res = null;
    let problem = null;
    try {
      await apiEvents(path, {body: req, signal, onEvent: ({type, data}) => {
        if (type === 'stdout' || type === 'stderr') append(data?.data ?? '', type);
        else if (type === 'exit') res = data;
        else if (type === 'error') problem = data ?? {};
        else if (type === 'json') {
          append(data.output ?? '');
          res = data;
        }
      }});
    } catch (err) {
      if (!streamNotSupported(err)) throw err;
      res = await api(path, {method: 'POST', body: req, signal});
      append(res.output);
    }
    if (problem) throw new ApiError(problem.status ?? 500, problem);
    return res;
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (!ready || stopper) return;
    const req = {command: command.value};
    if (timeout.value.trim()) req.timeout_seconds = Number(timeout.value);
    stopper = new AbortController();
    const signal = AbortSignal.any([ctx.signal, stopper.signal]);
    output.replaceChildren();
    output.hidden = true;
    error.textContent = '';
    result.replaceChildren();
    run.disabled = true;
    stop.hidden = false;
    fill(status, h('span', {class: 'spinner', 'aria-hidden': 'true'}), 'Running…');
    const began = performance.now();
    try {
      const res = await execute(req, signal);
      const took = duration(performance.now() - began);
      if (!output.textContent) {
        output.hidden = false;
        output.append(h('span', {class: 'muted'}, '(no output)'));
      }
      if (res) {
        fill(status, `Finished in ${took}.`);
        fill(result, outcome(res));
      } else {
        fill(status, `The stream ended after ${took} without the command’s exit status.`);
      }
    } catch (err) {
      if (ctx.signal.aborted) return;
      if (stopper.signal.aborted) {
        fill(status, 'Stopped: the command was ended.');
      } else {
        status.replaceChildren();
        error.textContent = errorText(err);
      }
    } finally {
      stopper = null;
      run.disabled = !ready;
      stop.hidden = true;
    }
    if (!ctx.signal.aborted) onRan();
  });

  return function update(sb, provider) {
    ready = sb.state === 'ready';
    if (!stopper) run.disabled = !ready;
    const cannot = provider && !provider.capabilities?.exec;
    fill(help, 'Runs the command with sh -c in the sandbox, its output shown as it comes; leaving the page or Stop ends it.',
      ready ? '' : ` Commands run only in a ready sandbox; this one is ${sb.state}.`,
      cannot ? ` The ${sb.provider} provider does not run commands: Tether will refuse.` : '');
  };
}
