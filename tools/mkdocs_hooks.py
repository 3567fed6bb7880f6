"""MkDocs hooks of the docs site (mkdocs.yml ``hooks``): after a build, remove what the theme ships that the site
never loads, so that the site stays small (docs/maintainers.md, "The docs").

* the JavaScript source maps (``*.map``): read only by a browser's developer tools, a megabyte of the site;
* the search's language packs (``assets/javascripts/lunr/``) for languages the site does not search in: the search
  worker loads ``lunr/min/lunr.<lang>.min.js`` (and its support files) for each configured language but English,
  which is built in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: files of assets/javascripts/lunr/ that a language needs besides its own lunr.<lang>.min.js
_LANG_SUPPORT = {"ja": ("tinyseg.js",), "hi": ("wordcut.js",), "th": ("wordcut.js",)}


def _languages(config: Any) -> list[str]:
    search = config["plugins"].get("search") if "plugins" in config else None
    langs = (search.config.get("lang") if search is not None else None) or ["en"]
    return [langs] if isinstance(langs, str) else list(langs)


def on_post_build(config: Any, **_: Any) -> None:
    site = Path(config["site_dir"])
    for m in site.joinpath("assets").rglob("*.map"):
        m.unlink()
    lunr = site / "assets" / "javascripts" / "lunr"
    if not lunr.is_dir():
        return
    langs = [lang for lang in _languages(config) if lang != "en"]
    keep = {f"min/lunr.{lang}.min.js" for lang in langs}
    keep |= {f for lang in langs for f in _LANG_SUPPORT.get(lang, ())}
    if langs:
        keep |= {"min/lunr.stemmer.support.min.js", "min/lunr.multi.min.js"}
    for f in sorted(lunr.rglob("*"), reverse=True):
        rel = f.relative_to(lunr).as_posix()
        if f.is_file() and rel not in keep:
            f.unlink()
        elif f.is_dir() and not any(f.iterdir()):
            f.rmdir()
