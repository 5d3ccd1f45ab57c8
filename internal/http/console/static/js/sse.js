// The tenant's live event stream (GET /v1/events/stream). EventSource cannot
// send an Authorization header, so the stream is read with fetch() and
// parsed here, as the HTML standard's EventSource would; after a disconnect
// it resumes with Last-Event-ID, so that no event is missed or repeated.

// SSEParser turns text chunks into {type, data, id} events.
export class SSEParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buf = '';
    this.type = '';
    this.data = [];
    this.lastEventId = '';
    this.retry = null;
  }

  push(chunk) {
    this.buf += chunk;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buf);
      // A final \r may be the first half of \r\n: wait for the next chunk.
      if (!m || (m[0] === '\r' && m.index === this.buf.length - 1)) return;
      const line = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      this.line(line);
    }
  }

  line(line) {
    if (line === '') {
      this.dispatch();
      return;
    }
    if (line.startsWith(':')) return; // a comment: keep-alive
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'event': this.type = value; break;
      case 'data': this.data.push(value); break;
      case 'id': if (!value.includes('\0')) this.lastEventId = value; break;
      case 'retry': if (/^\d+$/.test(value)) this.retry = Number(value); break;
      default: break; // unknown fields are ignored
    }
  }

  dispatch() {
    const type = this.type || 'message';
    const data = this.data;
    this.type = '';
    this.data = [];
    if (data.length === 0) return;
    this.onEvent({type, data: data.join('\n'), id: this.lastEventId});
  }
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, {once: true});
});

// EventStream follows the stream until stop(), reconnecting with backoff.
// onEvent gets each Event object; onStatus gets 'connecting', 'live' or
// 'reconnecting' (with a message); onConnect is called on each successful
// (re)connection; onUnauthorized gets the 401's problem.
export class EventStream {
  constructor({path = '/v1/events/stream', key, onEvent, onStatus = () => {}, onConnect = () => {}, onUnauthorized = () => {}}) {
    Object.assign(this, {path, key, onEvent, onStatus, onConnect, onUnauthorized});
    this.lastId = '';
    this.abort = null;
  }

  start() {
    if (this.abort) return;
    this.abort = new AbortController();
    this.run(this.abort.signal);
  }

  stop() {
    this.abort?.abort();
    this.abort = null;
  }

  async run(signal) {
    let backoff = 1000;
    let first = true;
    while (!signal.aborted) {
      let wait = backoff;
      this.onStatus(first ? 'connecting' : 'reconnecting');
      first = false;
      try {
        const headers = {Accept: 'text/event-stream', Authorization: `Bearer ${this.key}`};
        if (this.lastId) headers['Last-Event-ID'] = this.lastId;
        const resp = await fetch(this.path, {headers, signal, cache: 'no-store', credentials: 'omit'});
        if (resp.status === 401) {
          this.onUnauthorized(await resp.json().catch(() => ({})));
          return;
        }
        if (!resp.ok) {
          const problem = await resp.json().catch(() => ({}));
          const after = Number(resp.headers.get('Retry-After'));
          if (after > 0) wait = after * 1000;
          this.onStatus('reconnecting', problem.detail || `HTTP ${resp.status}`);
        } else {
          backoff = 1000;
          wait = backoff;
          this.onStatus('live');
          this.onConnect();
          await this.read(resp.body, signal);
        }
      } catch (err) {
        if (signal.aborted) return;
        this.onStatus('reconnecting', err.message);
      }
      if (signal.aborted) return;
      await sleep(wait, signal);
      backoff = Math.min(backoff * 2, 15000);
    }
  }

  async read(body, signal) {
    const parser = new SSEParser((ev) => {
      if (ev.type === 'event') {
        this.lastId = ev.id;
        let event;
        try {
          event = JSON.parse(ev.data);
        } catch {
          return;
        }
        this.onEvent(event);
      } else if (ev.type === 'error') {
        let problem = {};
        try { problem = JSON.parse(ev.data); } catch { /* keep {} */ }
        this.onStatus('reconnecting', problem.detail || 'the stream stopped');
      }
    });
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done || signal.aborted) return;
        parser.push(value);
      }
    } finally {
      reader.releaseLock();
    }
  }
}
