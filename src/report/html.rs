//! A small typed HTML builder: element and attribute names are `'static`
//! (they come from jsbench's code), every text and attribute value is
//! escaped on the way in, and unescaped markup enters only as [`Trusted`],
//! which only jsbench's own renderers make. Profile text, variant names,
//! invariant details and error strings are user data and can hold `<`, `&`
//! or quotes; with this builder there is no way to write them unescaped.

use std::borrow::Cow;

/// Markup that jsbench produced itself and that is inserted verbatim.
#[derive(Debug, Clone, PartialEq)]
pub struct Trusted(String);

impl Trusted {
    /// An SVG drawn by plotters (which escapes the text it draws),
    /// prepared for inlining: the XML namespace declaration, redundant
    /// inside HTML, is dropped so the page names no URL at all.
    pub fn inline_svg(svg: &str) -> Trusted {
        Trusted(
            svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
                .replacen("<?xml version=\"1.0\" encoding=\"UTF-8\"?>", "", 1)
                .trim()
                .to_string(),
        )
    }

    /// A stylesheet written in jsbench's source.
    pub fn css(text: &'static str) -> Trusted {
        Trusted(text.to_string())
    }
}

/// Escapes text for element content and quoted attribute values.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.contains(['&', '<', '>', '"', '\'']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The page under construction.
#[derive(Default)]
pub struct Html {
    out: String,
}

/// Attributes: a `'static` name and a value that is escaped.
pub type Attrs<'a> = &'a [(&'static str, &'a str)];

impl Html {
    /// A whole page: `<html lang="en">`, its head (the charset, `metas`,
    /// `title` and the stylesheet `css`), and the body `body` fills.
    pub fn page(
        title: &str,
        metas: &[Attrs],
        css: &'static str,
        body: impl FnOnce(&mut Html),
    ) -> String {
        let mut h = Html {
            out: "<!DOCTYPE html>\n".into(),
        };
        h.el("html", &[("lang", "en")], |h| {
            h.el("head", &[], |h| {
                h.void("meta", &[("charset", "utf-8")]);
                for attrs in metas {
                    h.void("meta", attrs);
                }
                h.text_el("title", &[], title);
                h.el("style", &[], |h| {
                    h.trusted(&Trusted::css(css));
                });
            });
            h.el("body", &[], body);
        });
        h.finish()
    }

    /// `<tag attrs>…</tag>` with `body` filling it.
    pub fn el(
        &mut self,
        tag: &'static str,
        attrs: Attrs,
        body: impl FnOnce(&mut Html),
    ) -> &mut Self {
        self.open(tag, attrs);
        body(self);
        self.close(tag);
        self
    }

    /// `<tag attrs>text</tag>`.
    pub fn text_el(&mut self, tag: &'static str, attrs: Attrs, text: &str) -> &mut Self {
        self.open(tag, attrs);
        self.text(text);
        self.close(tag);
        self
    }

    /// A table row of `cells`, each a `tag` (`th`, `td`) holding its text.
    pub fn row<T: AsRef<str>>(&mut self, tag: &'static str, cells: impl IntoIterator<Item = T>) {
        self.el("tr", &[], |h| {
            for cell in cells {
                h.text_el(tag, &[], cell.as_ref());
            }
        });
    }

    /// An element without content or end tag (`meta`, `br`).
    pub fn void(&mut self, tag: &'static str, attrs: Attrs) -> &mut Self {
        self.open(tag, attrs);
        self
    }

    pub fn text(&mut self, text: &str) -> &mut Self {
        self.out.push_str(&escape(text));
        self
    }

    pub fn trusted(&mut self, markup: &Trusted) -> &mut Self {
        self.out.push_str(&markup.0);
        self
    }

    pub fn finish(self) -> String {
        self.out
    }

    fn open(&mut self, tag: &'static str, attrs: Attrs) {
        self.out.push('<');
        self.out.push_str(tag);
        for (name, value) in attrs {
            self.out.push(' ');
            self.out.push_str(name);
            self.out.push_str("=\"");
            self.out.push_str(&escape(value));
            self.out.push('"');
        }
        self.out.push('>');
    }

    fn close(&mut self, tag: &'static str) {
        self.out.push_str("</");
        self.out.push_str(tag);
        self.out.push('>');
        // Block-level elements end a line: the page stays diffable.
        const BLOCKS: [&str; 22] = [
            "p", "div", "section", "table", "tr", "ul", "li", "h1", "h2", "h3", "figure", "header",
            "footer", "head", "body", "html", "details", "pre", "style", "nav", "thead", "tbody",
        ];
        if BLOCKS.contains(&tag) {
            self.out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attribute_values_are_escaped() {
        assert_eq!(escape("plain"), "plain");
        assert_eq!(
            escape(r#"<script>alert("x") & 'y'</script>"#),
            "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;"
        );
        let mut h = Html::default();
        h.el("p", &[("title", "a\"b<c")], |h| {
            h.text("1 < 2 & </p><img src=x>");
        });
        assert_eq!(
            h.finish(),
            "<p title=\"a&quot;b&lt;c\">1 &lt; 2 &amp; &lt;/p&gt;&lt;img src=x&gt;</p>\n"
        );
    }

    #[test]
    fn inline_svg_drops_the_namespace_url() {
        let svg = "<svg width=\"10\" height=\"10\" viewBox=\"0 0 10 10\" xmlns=\"http://www.w3.org/2000/svg\">\n<text>a &lt; b</text>\n</svg>\n";
        let mut h = Html::default();
        h.trusted(&Trusted::inline_svg(svg));
        let out = h.finish();
        assert!(!out.contains("http"), "{out}");
        assert!(
            out.starts_with("<svg width=\"10\"") && out.ends_with("</svg>"),
            "{out}"
        );
        assert!(out.contains("a &lt; b"));
    }
}
