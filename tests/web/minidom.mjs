// The part of the DOM the web client's renderers use (ui/dom.js, ui/markdown.js), for node's
// test runner: elements, text nodes, fragments, and a serialisation to compare trees by.
// Installed as globalThis.document and globalThis.Node by install().

class MiniNode {
  constructor() {
    this.parentNode = null;
  }

  remove() {
    if (!this.parentNode) return;
    const siblings = this.parentNode.childNodes;
    siblings.splice(siblings.indexOf(this), 1);
    this.parentNode = null;
  }

  replaceWith(...nodes) {
    const parent = this.parentNode;
    const at = parent.childNodes.indexOf(this);
    const adopted = parent.adopt(nodes);
    this.remove();
    parent.childNodes.splice(at, 0, ...adopted);
  }
}

class MiniText extends MiniNode {
  constructor(data) {
    super();
    this.data = data;
  }

  get textContent() { return this.data; }

  set textContent(v) { this.data = String(v); }

  serialize() { return JSON.stringify(this.data); }
}

class MiniParent extends MiniNode {
  constructor() {
    super();
    this.childNodes = [];
  }

  /** `nodes` (strings become text) taken from wherever they are, as children-to-be. */
  adopt(nodes) {
    const out = [];
    for (const n of nodes) {
      if (n instanceof MiniFragment) {
        const moved = [...n.childNodes];
        n.childNodes = [];
        for (const c of moved) { c.parentNode = this; out.push(c); }
        continue;
      }
      const node = n instanceof MiniNode ? n : new MiniText(String(n));
      node.remove();
      node.parentNode = this;
      out.push(node);
    }
    return out;
  }

  append(...nodes) {
    this.childNodes.push(...this.adopt(nodes));
  }

  replaceChildren(...nodes) {
    for (const c of [...this.childNodes]) c.remove();
    this.append(...nodes);
  }

  get firstChild() { return this.childNodes[0] ?? null; }

  get textContent() { return this.childNodes.map((c) => c.textContent).join(''); }

  set textContent(v) { this.replaceChildren(String(v)); }

  /** Only the one selector the renderer uses: ':scope > A > B'. */
  querySelectorAll(selector) {
    const m = /^:scope > (\w+) > (\w+)$/.exec(selector);
    if (!m) throw new Error(`minidom: selector not supported: ${selector}`);
    const [, a, b] = m;
    return this.childNodes.filter((c) => c.tagName === a)
      .flatMap((c) => c.childNodes.filter((d) => d.tagName === b));
  }

  serialize() { return this.childNodes.map((c) => c.serialize()).join(''); }
}

class MiniFragment extends MiniParent {}

class MiniElement extends MiniParent {
  constructor(tag) {
    super();
    this.tagName = tag;
    this.attributes = new Map();
    this.dataset = {};
    this.className = '';
  }

  setAttribute(name, value) { this.attributes.set(name, String(value)); }

  getAttribute(name) { return this.attributes.get(name) ?? null; }

  addEventListener() {}

  serialize() {
    const attrs = [...this.attributes].sort().map(([k, v]) => ` ${k}=${JSON.stringify(v)}`);
    if (this.className) attrs.unshift(` class=${JSON.stringify(this.className)}`);
    for (const [k, v] of Object.entries(this.dataset).sort()) attrs.push(` data-${k}=${JSON.stringify(String(v))}`);
    return `<${this.tagName}${attrs.join('')}>${super.serialize()}</${this.tagName}>`;
  }
}

export function install() {
  globalThis.Node = MiniNode;
  globalThis.document = {
    createElement: (tag) => new MiniElement(tag),
    createTextNode: (data) => new MiniText(data),
    createDocumentFragment: () => new MiniFragment(),
  };
}
