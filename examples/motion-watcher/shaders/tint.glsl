// The tutorial's step 5: a warm tint over the whole frame.
vec4 effect(vec4 color, vec2 uv) {
    return vec4(color.r * 1.1, color.g, color.b * 0.8, color.a);
}
