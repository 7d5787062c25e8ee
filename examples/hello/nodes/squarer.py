from tatolab.stream import RuntimeContextLimitedAccess, node


@node
class Squarer:
    """Squares every number it reads."""

    @node.input(delivery_profile="ordered")
    def numbers(self) -> dict: ...

    @node.output()
    def squares(self) -> dict: ...

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        bag = ctx.inputs.read("numbers")
        if bag is not None:
            ctx.outputs.write("squares", {"n": bag["n"], "square": bag["n"] ** 2, "sent_ns": bag["sent_ns"]})
