"""The cache of loaded profiles (``registry.load_profile``): what a cached
load gives is what reading the directory gives, and a changed file is read
again."""

import shutil

from fakedebugfs.engine.ftrace import registry
from fakedebugfs.engine.ftrace.profile import DEFAULT_PROFILE, Profile


def _fresh(path):
    return registry.load_profile.__wrapped__(str(path))


def test_cached_profile_is_the_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKEDEBUGFS_BUILD", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_cachable", lambda d: True)
    prof_dir = tmp_path / "prof"
    shutil.copytree(DEFAULT_PROFILE, prof_dir)
    first = _fresh(prof_dir)  # read, then saved
    assert list((tmp_path / "cache" / "profiles").iterdir())
    again = _fresh(prof_dir)  # from the cache
    assert vars(again) == vars(first) == vars(Profile(prof_dir))
    assert isinstance(again.formats, registry.PackedTexts)  # texts kept packed
    key = next(iter(again.formats))
    assert again.formats[key] == Profile(prof_dir).formats[key]
    assert registry.EventRegistry(again).text(key) == again.formats[key]
    assert again.available_events() == first.available_events()


def test_changed_profile_is_read_again(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKEDEBUGFS_BUILD", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_cachable", lambda d: True)
    prof_dir = tmp_path / "prof"
    shutil.copytree(DEFAULT_PROFILE, prof_dir)
    _fresh(prof_dir)
    (prof_dir / "uname").write_text("6.99.0-test\n")
    assert _fresh(prof_dir).release == "6.99.0-test"
    formats = prof_dir / "formats"
    first = formats.read_text().split("\n### ", 2)
    formats.write_text(first[0] + "\n### " + first[2])  # the second event gone
    assert _fresh(prof_dir).formats == Profile(prof_dir).formats
    assert len(_fresh(prof_dir).formats) == len(Profile(DEFAULT_PROFILE).formats) - 1


def test_only_shipped_profiles_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKEDEBUGFS_BUILD", str(tmp_path / "cache"))
    prof_dir = tmp_path / "prof"
    shutil.copytree(DEFAULT_PROFILE, prof_dir)
    assert vars(_fresh(prof_dir)) == vars(Profile(prof_dir))
    assert not (tmp_path / "cache").exists()
    _fresh(DEFAULT_PROFILE)
    assert list((tmp_path / "cache" / "profiles").iterdir())


def test_unwritable_cache_still_loads(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("FAKEDEBUGFS_BUILD", str(blocker))  # not a directory
    prof = _fresh(DEFAULT_PROFILE)
    assert vars(prof) == vars(Profile(DEFAULT_PROFILE))
