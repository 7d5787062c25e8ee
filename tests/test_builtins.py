"""Built-in nodes without a runtime: what the SDK carries, the pattern's pixels, GLSL in-process."""

from __future__ import annotations

import os
import uuid

import pytest

from tatolab._classpath import load_class
from tatolab._errors import ConfigError, NodeDefinitionError
from tatolab._runtime.surfaces import is_builtin
from tatolab._sdk import builtins as described
from tatolab._sdk.builder import StreamBuilder
from tatolab._sdk.builtins import GlslPixelEffect, TestPatternSource, implementation_of, implements
from tatolab._sdk.nodes import describe_node, is_node, node_spec

np = pytest.importorskip("numpy")


def test_the_sdk_describes_built_ins_and_checks_their_config_at_add():
    builder = StreamBuilder("bars")
    pattern = builder.add(TestPatternSource, config={"width": 640, "height": 360})
    effect = builder.add(GlslPixelEffect, config={"source": "vec4 effect(vec4 c, vec2 uv) { return c; }"})
    builder.connect(pattern.output("video"), effect.input("video"))
    nodes = builder._graph()["nodes"]
    assert [(n["name"], n["class"], n["builtin"]) for n in nodes] == [
        ("testpatternsource", "tatolab._builtins.test_pattern:TestPatternSource", True),
        ("glslpixeleffect", "tatolab._builtins.glsl:GlslPixelEffect", True),
    ]
    assert "Colour bars" in nodes[0]["doc"]
    with pytest.raises(ConfigError, match="fps must be"):
        builder.add(TestPatternSource, config={"fps": 0}, name="bad")
    with pytest.raises(ConfigError, match="pattern must be one of bars, ramp"):
        builder.add(TestPatternSource, config={"pattern": "zebra"}, name="bad")
    with pytest.raises(ConfigError, match="exactly one"):
        builder.add(GlslPixelEffect, config={}, name="bad")


BUILTINS = sorted(
    name for name in described.__all__ if is_node(getattr(described, name)) and implementation_of(getattr(described, name))
)


def test_every_builtin_is_checked():
    assert len(BUILTINS) >= 14 and {"TestPatternSource", "CameraSource", "SpeakerSink", "OpusDecoder"} <= set(BUILTINS)


@pytest.mark.parametrize("name", BUILTINS)
def test_the_code_of_each_builtin_is_declared_by_its_description(name):
    """The code the runtime runs subclasses the description a project's stream names: the same
    ports, execution, limits, config type and docstring, declared once (@implements)."""
    description = getattr(described, name)
    code = load_class(implementation_of(description))
    assert issubclass(code, description)
    ours, theirs = describe_node(description), describe_node(code)
    assert ours.pop("builtin") is True and ours["doc"], name
    assert ours == theirs  # class (the code's path), doc, execution, interval, ports, limits
    assert node_spec(code).config_type is node_spec(description).config_type is not None
    assert node_spec(code).class_path == implementation_of(description)


def test_an_implementation_that_changes_its_descriptions_ports_is_refused():
    with pytest.raises(NodeDefinitionError, match=r"changes what its description TestPatternSource declares"):
        @implements
        class Changed(described.TestPatternSource):
            __module__, __qualname__ = "tatolab._builtins.test_pattern", "TestPatternSource"  # where it is named
            video = None  # no longer the output port

    with pytest.raises(NodeDefinitionError, match=r"whose @builtin names tatolab._builtins.test_pattern:TestPatternSource"):
        @implements
        class Elsewhere(described.TestPatternSource):
            pass


def test_only_the_runtimes_own_code_runs_as_built_in():
    assert is_builtin({"class": "tatolab._builtins.glsl:GlslPixelEffect", "builtin": True})
    assert not is_builtin({"class": "nodes.evil:Evil", "builtin": True})  # a graph the project wrote
    assert not is_builtin({"class": "tatolab._builtins.glsl:GlslPixelEffect"})


def test_the_pattern_has_the_bars_and_a_square_that_moves():
    from tatolab._builtins.test_pattern import background, square_at
    from tatolab._sdk.builtins import TestPatternConfig

    image = background(TestPatternConfig(width=320, height=160))
    assert image.shape == (160, 320, 4) and (image[..., 3] == 255).all()
    assert image[10, 20].tolist() == [255, 255, 255, 255] and image[10, 300].tolist() == [0, 0, 0, 255]
    assert image[10, 5 * 40 + 20].tolist() == [255, 0, 0, 255]
    assert square_at(0, 320, 160) != square_at(1, 320, 160)
    ramp = background(TestPatternConfig(width=256, height=64, pattern="ramp"))
    assert ramp[0, 0, 0] == 0 and ramp[0, 255, 0] == 255


def test_compile_errors_name_the_line():
    from tatolab._builtins.glsl import describe_compile_error

    message = "0:3(5): error: syntax error, unexpected NEW_IDENTIFIER\n0:7(1): error: `x' undeclared"
    assert describe_compile_error(message, "shaders/tint.glsl") == (
        "shaders/tint.glsl line 3: error: syntax error, unexpected NEW_IDENTIFIER; "
        "shaders/tint.glsl line 7: error: `x' undeclared"
    )


def _ctx(frame):
    """What the GLSL effect gets from the runtime (tatolab.testing's FakeContext), ``frame`` waiting on ``video``."""
    from tatolab._builtins.glsl import GlslPixelEffect as GlslCode
    from tatolab.testing import FakeContext

    return FakeContext(GlslCode, inputs={"video": [frame]}, node="tint")


@pytest.fixture
def pool():
    from tatolab._links import ring, shm
    from tatolab._surfaces import pool as surfaces

    base = f"{shm.private_folder()}/tatolab-test-{os.getpid()}-{uuid.uuid4().hex[:8]}+surfaces"
    surfaces.create(base, slots=6)
    surfaces.configure(base)
    yield
    surfaces.configure(None)
    ring.reap(base)


def _effect(source: str):
    pytest.importorskip("moderngl")
    from tatolab._builtins.glsl import GlslPixelEffect as GlslCode
    from tatolab._sdk.nodes import create

    return create(GlslCode, {"source": source}, node="tint")


def test_a_glsl_invert_gives_255_minus_x_and_keeps_alpha(pool):
    from tatolab._surfaces.frame import VideoFrame

    picture = np.random.default_rng(3).integers(0, 256, size=(36, 64, 4), dtype=np.uint8)
    source = VideoFrame.from_numpy(picture)
    ctx = _ctx(source)
    effect = _effect("vec4 effect(vec4 color, vec2 uv) {\n    return vec4(1.0 - color.rgb, color.a);\n}\n")
    effect.setup(ctx)
    try:
        effect.process(ctx)
    finally:
        effect.teardown(ctx)
    assert ctx.run.messages("error") == [] and len(ctx.run.outputs["video_out"]) == 1
    out = VideoFrame.open(ctx.run.outputs["video_out"][0])
    assert out.surface_id != source.surface_id  # a new frame; the input is untouched
    assert np.array_equal(out.cpu()[..., :3], 255 - picture[..., :3])
    assert np.array_equal(out.cpu()[..., 3], picture[..., 3])
    assert np.array_equal(source.cpu(), picture)


def test_a_broken_glsl_function_is_reported_by_node_and_line_and_sends_nothing(pool):
    from tatolab._surfaces.frame import VideoFrame

    source = VideoFrame.from_numpy(np.zeros((8, 8, 4), dtype=np.uint8))
    ctx = _ctx(source)
    effect = _effect("vec4 effect(vec4 color, vec2 uv) {\n    return colour;\n}\n")
    effect.setup(ctx)
    effect.process(ctx)
    effect.teardown(ctx)
    assert ctx.run.outputs == {"video_out": []}
    errors = ctx.run.messages("error")
    assert len(errors) == 1 and errors[0].startswith("node tint: GLSL error in the GLSL source line 2:")
    assert "colour" in errors[0]


def test_an_effect_can_use_uv_and_the_frames_resolution(pool):
    from tatolab._surfaces.frame import VideoFrame

    source = VideoFrame.from_numpy(np.zeros((4, 8, 4), dtype=np.uint8))
    ctx = _ctx(source)
    # red: the pixel's column as a count of pixels; green: 255 on the top row only (uv.y < 1/4)
    effect = _effect("vec4 effect(vec4 color, vec2 uv) {\n"
                     "    return vec4(floor(uv.x * resolution.x) / 255.0, uv.y < 0.25 ? 1.0 : 0.0, 0.0, 1.0);\n}\n")
    effect.setup(ctx)
    effect.process(ctx)
    effect.teardown(ctx)
    out = VideoFrame.open(ctx.run.outputs["video_out"][0]).cpu()
    assert out[0, :, 0].tolist() == list(range(8))
    assert out[:, 0, 1].tolist() == [255, 0, 0, 0]
