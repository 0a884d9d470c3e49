"""A tiny DOM over html.parser, enough for the site tests to read pages back (tables, ids,
classes, SVG elements)."""

from __future__ import annotations

from html.parser import HTMLParser


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: "Node | None"):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self, tag: str | None = None, cls: str | None = None):
        for c in self.children:
            if isinstance(c, Node):
                if (tag is None or c.tag == tag) and (cls is None or cls in c.classes):
                    yield c
                yield from c.iter(tag, cls)

    def find(self, tag: str | None = None, cls: str | None = None) -> "Node":
        found = next(self.iter(tag, cls), None)
        assert found is not None, f"no <{tag} class={cls}> under <{self.tag}>"
        return found

    def by_id(self, id_: str) -> "Node":
        for n in self.iter():
            if n.attrs.get("id") == id_:
                return n
        raise AssertionError(f"no element with id {id_!r}")


VOID = {"meta", "br", "hr", "img", "input", "link", "col", "wbr", "source", "path", "rect", "circle",
        "line", "polyline", "stop"}


class DomBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        assert n is not None, f"unbalanced </{tag}>"
        self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def parse(html: str) -> Node:
    b = DomBuilder()
    b.feed(html)
    b.close()
    assert b.cur is b.root, "unclosed elements"
    return b.root
