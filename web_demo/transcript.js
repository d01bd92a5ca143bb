// The conversation list: one entry per item, growing with transcript deltas.
export class Transcript {
  constructor(list) {
    this.list = list;
    this.items = new Map(); // itemId → <li>
  }

  entry(itemId, role) {
    let li = this.items.get(itemId);
    if (!li) {
      li = document.createElement("li");
      li.className = role;
      li.dataset.role = role;
      const who = document.createElement("span");
      who.className = "who";
      who.textContent = role === "user" ? "You:" : "Assistant:";
      li.append(who, document.createElement("span"));
      this.list.append(li);
      this.items.set(itemId, li);
    }
    return li;
  }

  user(itemId, text) {
    this.entry(itemId, "user").lastChild.textContent = text;
    this.scroll();
  }

  assistant(itemId, delta) {
    this.entry(itemId, "assistant").lastChild.textContent += delta;
    this.scroll();
  }

  interrupted(itemId) {
    this.items.get(itemId)?.classList.add("interrupted");
  }

  notice(text) {
    const li = document.createElement("li");
    li.className = "notice";
    li.textContent = text;
    this.list.append(li);
    this.scroll();
  }

  text(role) {
    return [...this.list.querySelectorAll(`li[data-role="${role}"] span:last-child`)]
      .map((s) => s.textContent).join("\n");
  }

  scroll() {
    this.list.scrollTop = this.list.scrollHeight;
  }
}
