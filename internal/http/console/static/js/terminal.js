// The terminal page (terminal.html#<sandbox id>): a login shell in a
// sandbox, drawn by xterm.js. A sandbox's page shows it in a frame
// (views/terminal.js). It is a page of its own because xterm.js styles the
// screen with <style> elements and style attributes it writes, which the
// console's Content-Security-Policy refuses; this page's policy allows
// inline styles, and nothing else the console's does not (console.go,
// docs/security.md).
//
// It starts the shell as a process with a terminal the size of the frame
// (POST /v1/sandboxes/{id}/processes with pty), then connects to that
// terminal's WebSocket (docs/processes.md): binary frames both ways (the
// keys typed, the screen's bytes), text frames for control: a resize from
// here, an exit, an error or dropped output from Tether. A browser cannot
// set headers on a WebSocket, so the API key goes in its subprotocol list,
// "tether.v1, tether.bearer.<key>", which the terminal's route takes.
// Leaving the page (Close terminal, another page, the tab closed) hangs the
// shell up (SIGHUP), as closing a terminal window does.

import {Terminal} from '../vendor/@xterm/xterm/lib/xterm.mjs';
import {FitAddon} from '../vendor/@xterm/addon-fit/lib/addon-fit.mjs';
import {api, session, errorText, url} from './api.js';

// SHELL is what the terminal runs (with sh -c): bash if the sandbox has
// it, else sh, as a login shell.
export const SHELL = 'command -v bash >/dev/null && exec bash -l; exec sh -l';

const PROTOCOL = 'tether.v1';
const KEY_PROTOCOL = 'tether.bearer.';

const status = document.getElementById('term-status');
const screen = document.getElementById('term-screen');

// say shows how the terminal is; kind (ok, bad) colours it.
function say(text, kind = '') {
  status.textContent = text;
  status.dataset.kind = kind;
}

// exitText says how the shell ended, from the exit frame.
export function exitText(exit) {
  if (exit.exited) return `The shell exited with code ${exit.code}.`;
  if (exit.signal) return `The shell was ended by signal ${exit.signal} (${exit.status}).`;
  return `The shell ended: ${exit.status}.`;
}

// terminalURL is the WebSocket URL of process pid's terminal in sandbox id.
function terminalURL(id, pid) {
  const u = url(`/v1/sandboxes/${encodeURIComponent(id)}/processes/${pid}/terminal`);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  return u;
}

// Session is one shell: its process, its WebSocket and what it shows.
class Session {
  constructor(id, key) {
    this.id = id;
    this.key = key;
    this.pid = null;
    this.ws = null;
    this.ended = false;
    this.problem = '';
    this.sent = '';
    this.encoder = new TextEncoder();
    this.term = new Terminal({cursorBlink: true, scrollback: 2000, fontFamily: 'ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace'});
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.term.open(screen);
    this.fit.fit();
  }

  // start starts the shell sized to the screen, then connects to it.
  async start() {
    const p = await api(`/v1/sandboxes/${encodeURIComponent(this.id)}/processes`, {
      method: 'POST', body: {command: SHELL, pty: {rows: this.term.rows, cols: this.term.cols}}, quiet401: true,
    });
    this.pid = p.pid;
    screen.dataset.pid = String(p.pid);
    this.mark(p.pty);
    this.connect();
  }

  // connect opens the terminal's WebSocket and wires it to the screen.
  connect() {
    this.ws = new WebSocket(terminalURL(this.id, this.pid), [PROTOCOL, KEY_PROTOCOL + this.key]);
    this.ws.binaryType = 'arraybuffer';
    this.ws.addEventListener('open', () => {
      say(`Connected: a shell, pid ${this.pid}.`, 'ok');
      this.resized();
      this.term.focus();
    });
    this.ws.addEventListener('message', (ev) => this.received(ev.data));
    this.ws.addEventListener('close', (ev) => {
      this.term.options.disableStdin = true;
      if (this.ended) return;
      const why = `${ev.code}${ev.reason ? `: ${ev.reason}` : ''}`;
      say(this.problem ? `${this.problem} Disconnected (${why}).` : `Disconnected (${why}); the shell goes on.`, 'bad');
    });
    this.term.onData((data) => this.send(this.encoder.encode(data)));
    this.term.onBinary((data) => this.send(Uint8Array.from(data, (c) => c.charCodeAt(0))));
    this.term.onResize(() => this.resized());
  }

  // received shows a frame from Tether: the screen's bytes, or control.
  received(data) {
    if (data instanceof ArrayBuffer) {
      this.term.write(new Uint8Array(data));
      return;
    }
    let ctl = {};
    try { ctl = JSON.parse(data); } catch { /* not JSON: nothing to act on */ }
    if (ctl.exit) {
      this.ended = true;
      say(exitText(ctl.exit), ctl.exit.code === 0 ? 'ok' : 'bad');
    } else if (ctl.error) {
      this.problem = `${ctl.error.detail ?? ctl.error.title} (${ctl.error.code})`;
      say(this.problem, 'bad');
    } else if (ctl.dropped) {
      this.term.write(`\r\n[${ctl.dropped.bytes} bytes of output were dropped]\r\n`);
    }
  }

  send(bytes) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(bytes);
  }

  // resized tells Tether the screen's size when it is not the one it has.
  resized() {
    const size = {rows: this.term.rows, cols: this.term.cols};
    if (this.ws?.readyState !== WebSocket.OPEN || `${size.rows}x${size.cols}` === this.sent) return;
    this.ws.send(JSON.stringify({resize: size}));
    this.mark(size);
  }

  // mark records the size Tether has, for whoever reads the page (tests).
  mark(size) {
    this.sent = `${size.rows}x${size.cols}`;
    screen.dataset.rows = String(size.rows);
    screen.dataset.cols = String(size.cols);
  }

  // hangUp sends the shell SIGHUP unless it ended; the request outlives
  // the page (keepalive).
  hangUp() {
    if (this.pid == null || this.ended) return;
    this.ended = true;
    fetch(url(`/v1/sandboxes/${encodeURIComponent(this.id)}/processes/${this.pid}/signal`), {
      method: 'POST', keepalive: true, credentials: 'omit', cache: 'no-store',
      headers: {Authorization: `Bearer ${this.key}`, 'Content-Type': 'application/json'},
      body: JSON.stringify({signal: 'HUP'}),
    }).catch(() => {});
    this.ws?.close(1000, 'the page was closed');
  }
}

async function main() {
  const id = decodeURIComponent(location.hash.replace(/^#/, ''));
  const key = session.key;
  if (!id || !key) {
    say(id ? 'Sign in to the console first.' : 'No sandbox: open a terminal from a sandbox’s page.', 'bad');
    return;
  }
  const s = new Session(id, key);
  addEventListener('pagehide', () => s.hangUp());
  let frame = 0;
  new ResizeObserver(() => {
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => s.fit.fit());
  }).observe(screen);
  try {
    await s.start();
  } catch (err) {
    say(err instanceof SyntaxError ? `This API key cannot be sent to a WebSocket: ${err.message}` : errorText(err), 'bad');
  }
}

main();
