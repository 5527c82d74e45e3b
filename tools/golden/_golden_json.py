"""The golden fixtures' JSON layout, shared by the tokenizer tools."""
import json


def compact(golden):
    """JSON with one line per list item (a case, a score, a text's ids), to keep the fixture
    small."""
    def item(v):
        return json.dumps(v, ensure_ascii=True, separators=(",", ":"))

    lines = []
    for k, v in golden.items():
        if isinstance(v, list):
            body = ",\n  ".join(item(x) for x in v)
            lines.append(f" {item(k)}: [\n  {body}\n ]")
        else:
            lines.append(f" {item(k)}: {item(v)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"
