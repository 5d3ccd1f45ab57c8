// A sandbox's terminal, on its page: Open terminal shows terminal.html (a
// login shell in the sandbox, drawn by xterm.js: js/terminal.js) in a
// frame; Close terminal takes the frame away, which hangs the shell up, as
// leaving the page does.

import {h, fill} from '../dom.js';

// terminalSection draws the section into box and returns update(sb,
// provider), which offers a terminal in a ready sandbox only.
export function terminalSection(box, id) {
  const help = h('p', {class: 'help', id: 'terminal-help'});
  const open = h('button', {type: 'button', id: 'terminal-open', disabled: true, 'aria-describedby': 'terminal-help'}, 'Open terminal');
  const close = h('button', {type: 'button', class: 'secondary', id: 'terminal-close', hidden: true}, 'Close terminal');
  const slot = h('div');
  fill(box, help, h('div', {class: 'actions'}, open, close), slot);
  let ready = false;

  open.addEventListener('click', () => {
    if (!ready) return;
    const frame = h('iframe', {class: 'terminal-frame', id: 'terminal-frame', title: `Terminal of ${id}`, src: `terminal.html#${encodeURIComponent(id)}`});
    frame.addEventListener('load', () => frame.focus());
    fill(slot, frame);
    open.hidden = true;
    close.hidden = false;
  });
  close.addEventListener('click', () => {
    slot.replaceChildren();
    close.hidden = true;
    open.hidden = false;
    open.disabled = !ready;
    open.focus();
  });

  return function update(sb, provider) {
    ready = sb.state === 'ready';
    open.disabled = !ready;
    const cannot = provider && !provider.capabilities?.pty;
    fill(help, 'A login shell in the sandbox (bash if it has one, else sh) in a terminal the size of its frame; what you type goes to the shell as you type it. Closing the terminal or leaving the page hangs the shell up.',
      ready ? '' : ` A terminal opens only in a ready sandbox; this one is ${sb.state}.`,
      cannot ? ` The ${sb.provider} provider has no terminals: Tether will refuse.` : '');
  };
}
