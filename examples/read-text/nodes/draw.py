from tatolab.stream import RuntimeContextLimitedAccess, VideoFrame, node

BOX = (255, 64, 32, 255)  # RGBA
LABEL = (255, 255, 255, 255)


@node
class TextOverlay:
    """Draws the boxes and words of the newest texts read onto a copy of each frame."""

    @node.input(delivery_profile="newest")
    def frames(self) -> dict: ...

    @node.input(delivery_profile="newest")
    def texts(self) -> dict: ...

    @node.output()
    def video(self) -> dict: ...

    def __init__(self) -> None:
        self.texts: list[dict] = []

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        read = ctx.inputs.read("texts")
        if read is not None:
            self.texts = read["texts"]
        frame = ctx.inputs.read("frames", into=VideoFrame)
        if frame is None:
            return
        import numpy as np
        from PIL import Image, ImageDraw

        picture = Image.fromarray(frame.cpu())  # a copy: the camera's frame is others' to read too
        draw = ImageDraw.Draw(picture)
        for text in self.texts:
            x0, y0, x1, y1 = text["box"]
            draw.rectangle((x0, y0, x1, y1), outline=BOX, width=2)
            label = f"{text['text']} {text['score']:.2f}"
            top = max(0, y0 - 14)
            draw.rectangle((x0, top, x0 + 7 * len(label) + 4, top + 13), fill=BOX)
            draw.text((x0 + 2, top), label, fill=LABEL)
        ctx.outputs.write("video", VideoFrame.from_numpy(np.asarray(picture), timestamp_ns=frame.timestamp_ns))
