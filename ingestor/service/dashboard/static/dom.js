// The page's elements. Document text is only ever put in the page as text (textContent), never
// as HTML: node texts are documents' contents.

export const $ = (id) => document.getElementById(id);

// a new element of that class (none: null) and text (none: null or undefined)
export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

// the banner's message ("": hidden)
export function showError(message) {
  const b = $("banner");
  b.textContent = message;
  b.hidden = !message;
}

// a button after the list that removes itself and loads the next page
export function moreButton(list, text, load) {
  const b = el("button", "more", text);
  b.type = "button";
  b.addEventListener("click", () => {
    b.remove();
    load();
  });
  list.after(b);
}
