from dataclasses import dataclass

from tatolab.stream import RuntimeContextLimitedAccess, VideoFrame, node


@dataclass
class TextReaderConfig:
    min_score: float = 0.5  # texts read with a lower confidence (0..1) are left out
    longest_side: int = 640  # frames are scaled (by the model's own preprocessing) so that no side is longer
    threads: int = 1  # ONNX Runtime's threads for each model call (0: one per core)


@node(watchdog_ms=60_000)
class TextReader:
    """Reads the text in each frame (RapidOCR: PP-OCRv4 text detection and recognition, run by ONNX
    Runtime on the CPU) and writes what it read, with each text's box in the frame's pixels."""

    # newest: a model slower than the camera reads the latest frame, never a queue of old ones
    @node.input(delivery_profile="newest")
    def frames(self) -> dict: ...

    @node.output()
    def texts(self) -> dict: ...

    def __init__(self, config: TextReaderConfig) -> None:
        self.config = config
        self.engine = None

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        # the model loads once per process, before the first bag; `tatolab graph` shows the node
        # `loading` (with these words) until setup returns
        ctx.loading("the OCR models (rapidocr-onnxruntime: PP-OCRv4 detection and recognition)")
        self.engine = load_engine(self.config)
        ctx.log.info("OCR models loaded", longest_side=self.config.longest_side, threads=self.config.threads)

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        frame = ctx.inputs.read("frames", into=VideoFrame)
        if frame is None:
            return
        # frame.cpu(): the RGBA pixels where the camera wrote them (no copy); the model's own
        # preprocessing converts them to the BGR it wants
        result, _ = self.engine(frame.cpu())
        ctx.outputs.write("texts", {"frame_timestamp_ns": frame.timestamp_ns,
                                    "texts": read_texts(result, self.config.min_score)})


def load_engine(config: TextReaderConfig):
    """RapidOCR with its models from its wheel, as this node runs it (bench/model.py runs the same)."""
    from rapidocr_onnxruntime import RapidOCR

    return RapidOCR(use_cls=False, det_limit_type="max", det_limit_side_len=config.longest_side,
                    intra_op_num_threads=config.threads or -1, inter_op_num_threads=1)


def read_texts(result: list | None, min_score: float) -> list[dict]:
    """RapidOCR's [[four corners, text, score], ...] as [{"text", "box": [x0, y0, x1, y1], "score"}]."""
    texts = []
    for corners, text, score in result or ():
        if float(score) < min_score:
            continue
        xs = [float(x) for x, _ in corners]
        ys = [float(y) for _, y in corners]
        texts.append({"text": text, "box": [round(min(xs)), round(min(ys)), round(max(xs)), round(max(ys))],
                      "score": round(float(score), 3)})
    return texts
