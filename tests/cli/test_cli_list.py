import json


def test_list_shows_library_and_operations(cli):
    result = cli("list")
    assert result.exit_code == 0
    assert "swish(x, beta=1.0)" in result.stdout
    assert "arXiv:1710.05941" in result.stdout
    assert "logsumexp" in result.stdout


def test_list_json_is_one_document(cli):
    result = cli("list", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    names = {f["name"] for f in data["functions"]}
    assert "swish" in names
    assert {op["name"] for op in data["operations"]} >= {"sigmoid", "matmul", "where"}


def test_list_missing_library_folder_is_exit_2(cli, tmp_path):
    result = cli("list", "--library", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_list_text_cuts_nothing(cli):
    # The source column cut every link to an ellipsis ("https://arxiv.org/abs/1704…"): a link a
    # reader cannot follow. Long words now fold onto the next line, every character kept.
    result = cli("list")
    assert result.exit_code == 0 and "…" not in result.stdout
    links = [f["link"] for f in json.loads(cli("list", "--json").stdout)["functions"] if f["link"]]
    cells = "".join(line.rstrip(" │").rsplit("│", 1)[-1].strip() for line in result.stdout.splitlines())
    assert links and all(link in cells for link in links)
