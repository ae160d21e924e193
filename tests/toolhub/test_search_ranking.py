"""The ranking behaviours of `search_tools` beyond plain BM25F: word forms, values, relatives,
intents, coverage, the name's prior, the demotions (a tool that acts where the query asks to read,
a deprecated tool), and that the order is one order, whatever k and input order."""

from __future__ import annotations

import random
import time
from typing import Any

import mcp_types
import pytest

from tests.toolhub.conftest import routes, tool
from toolscore.toolhub import search
from toolscore.toolhub.capabilities import index_capabilities
from toolscore.toolhub.search import SearchIndex
from toolscore.toolhub.synonyms import related
from toolscore.toolhub.text import compounds, stem, terms


def build(*tools: mcp_types.Tool, server: str = "s0") -> SearchIndex:
    found, config = routes({server: list(tools)})
    return SearchIndex(index_capabilities(found, config).tools)


def names(idx: SearchIndex, query: str, k: int = 1, **filters: Any) -> list[str]:
    return [hit.name for hit in idx.search(query, k, **filters)]


def score(idx: SearchIndex, query: str, name: str) -> float:
    return next(hit.score for hit in idx.search(query, 50) if hit.name == f"s0__{name}")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("modified", "modify"),
        ("copied", "copy"),
        ("notifications", "notify"),
        ("verification", "verify"),
        ("configuration", "configure"),
        ("recommendations", "recommend"),
        ("financial", "finance"),
        ("commercial", "commerce"),
        ("installation", "install"),
        ("conversion", "convert"),
        ("extension", "extend"),
        ("permission", "permit"),
        ("exclusion", "exclude"),
        ("definition", "define"),
        ("recursively", "recursive"),
        ("automatically", "automatic"),
        ("summarise", "summarize"),
        ("revision", "revise"),
        ("precision", "precise"),
        ("analysed", "analyzed"),
        ("colour", "color"),
        ("cancelled", "canceled"),
        ("catalogue", "catalog"),
        ("cookies", "cookie"),
        ("written", "write"),
        ("ran", "run"),
        ("shown", "show"),
        ("children", "child"),
        ("thoughts", "think"),
    ],
)
def test_more_word_forms_meet(a: str, b: str) -> None:
    assert stem(a) == stem(b)


def test_the_stemmer_keeps_apart_what_differs() -> None:
    # `-er` is no suffix it strips (`customer` is not `custom`), and a few `-s` words are no plurals
    assert stem("customer") != stem("custom") and stem("header") != stem("head")
    assert stem("news") != stem("new") and stem("version") != stem("vert")
    assert stem("only") == "only" and stem("family") == "family" and stem("status") == "status"


def test_camel_case_is_split_and_also_kept_whole() -> None:
    assert terms("readFileSync") == ["read", stem("file"), "sync"]
    assert compounds("Run JavaScript in the page; use localStorage, not snake_case") == [
        "javascript",
        stem("localstorage"),
    ]
    idx = build(
        tool("evaluate", "Evaluate JavaScript in the page."),
        tool("run_java", "Run a Java program."),
        tool("get_item", "Get one localStorage item.", {"key": {}}),
    )
    assert names(idx, "javascript") == ["s0__evaluate"]  # written in one piece, found in two
    assert names(idx, "JavaScript") == ["s0__evaluate"]  # whole where the index knows it whole
    assert [w for w in idx.search("JavaScript", 1)[0].matched] == ["javascript"]
    assert names(idx, "localStorage item") == ["s0__get_item"]


def test_values_in_a_query_count_as_their_kind() -> None:
    idx = build(
        tool("read_file", "Read a file.", {"path": {}}),
        tool("send_email", "Send an email.", {"to": {}}),
        tool("git_show", "Shows the contents of a commit.", {"revision": {}}),
        tool("abc_tool", "The abc of things."),
    )
    assert names(idx, "open the README") == ["s0__read_file"]  # a well-known file name is a file
    assert names(idx, "open .gitignore") == ["s0__read_file"]  # a dotfile too
    assert names(idx, "write to bob@example.com") == ["s0__send_email"]  # an address is an email
    assert names(idx, "abc123") == []  # a hash says nothing of a tool: not `abc`
    assert idx.search("bob@example.com", 1)[0].matched == ("bob@example.com",)


def test_a_commit_hash_counts_as_a_commit_and_an_owner_name_pair_as_a_repository() -> None:
    idx = build(
        tool("git_show", "Shows the contents of a commit.", {"revision": {}}),
        tool("get_repository", "Get a repository's details.", {"owner": {}, "repo": {}}),
        tool("read_write_mode", "Switch between read and write mode."),
        tool("auth_token", "Get an auth token."),
    )
    assert names(idx, "what did a1b2c3d do") == ["s0__git_show"]  # seven hex digits or more: a commit
    assert idx.search("a1b2c3d", 1)[0].matched == ("a1b2c3d",)
    assert names(idx, "abc123") == []  # shorter, an id
    assert names(idx, "details of acme/widgets") == ["s0__get_repository"]
    assert names(idx, "octo-org/api-server") == ["s0__get_repository"]
    assert names(idx, "read/write") == ["s0__read_write_mode"]  # two common words are words
    assert names(idx, "read/write/execute mode") == ["s0__read_write_mode"]  # three too: not a path
    assert names(idx, "acme/widgets.md", 5) == []  # with an extension: a file


@pytest.mark.parametrize("where", ["~/projects/data", "/var/log/app", "./build", "src/auth", "src/", "C:\\work\\data"])
def test_a_local_path_counts_as_a_path_not_as_its_folders_names(where: str) -> None:
    idx = build(
        tool("list_directory", "List the entries of a directory.", {"path": {}}),
        tool("list_projects", "List the projects of an account."),
        tool("auth_token", "Get an auth token."),
        tool("get_data", "Get the data of a record."),
        tool("start_build", "Start a build."),
    )
    assert names(idx, f"what is in {where}") == ["s0__list_directory"]
    assert idx.search(where, 1)[0].matched == (where,)


def test_a_url_path_keeps_its_words_a_branch_and_a_version_count_as_such() -> None:
    idx = build(
        tool("mock_route", "Answer the requests to a URL pattern with a mocked response.", {"pattern": {}}),
        tool("checkout_order", "Check out the cart as an order."),
        tool("list_branches", "List the branches of a repository.", {"branch": {}}),
        tool("get_release_by_tag", "Get a release by its tag."),
        tool("read_file", "Read a file.", {"path": {}}),
        tool("read_multiple_files", "Read several files at once.", {"paths": {}}),
    )
    # a route of a web app is not a host's folder: its words say what it serves
    assert names(idx, "checkout /api/checkout") == ["s0__checkout_order"]
    assert names(idx, "is it merged into release/1.4") == ["s0__list_branches"]  # not a repository
    assert names(idx, "notes for v14.2.0") == ["s0__get_release_by_tag"]
    assert names(idx, "what shipped in 2.31.0") == ["s0__get_release_by_tag"]
    assert names(idx, "show a.yml") == ["s0__read_file"]
    assert names(idx, "show a.yml b.yml c.yml") == ["s0__read_multiple_files"]  # several: files


def test_an_api_key_is_a_secret_and_a_size_in_pixels_a_width() -> None:
    idx = build(
        tool("press_key", "Press a key on the keyboard.", {"key": {}}),
        tool("list_secret_scanning_alerts", "List secret scanning alerts.", {"repo": {}}),
        tool("resize", "Resize the browser window.", {"width": {}, "height": {}}),
        tool("take_screenshot", "Take a screenshot of the page."),
    )
    assert names(idx, "did anyone push an AWS access key") == ["s0__list_secret_scanning_alerts"]
    assert names(idx, "leaked api keys") == ["s0__list_secret_scanning_alerts"]
    assert names(idx, "press the Enter key") == ["s0__press_key"]  # a key to press stays one
    assert names(idx, "look like a 390px-wide phone") == ["s0__resize"]
    assert names(idx, "1280x720 please") == ["s0__resize"]


def test_a_name_out_of_code_counts_as_code_not_as_its_words() -> None:
    idx = build(
        tool("search_code", "Search code across repositories.", {"query": {}}),
        tool("get_config", "Get the configuration."),
        tool("parse_document", "Parse a document into text."),
        tool("trigger_run", "Run a workflow.", {"inputs": {}}),
    )
    assert names(idx, "where is parse_config called") == ["s0__search_code"]  # snake_case: code
    assert names(idx, "who calls refund()") == ["s0__search_code"]  # a call
    assert names(idx, "where do we call retry( ?") == ["s0__search_code"]
    assert idx.search("parse_config", 1)[0].matched == ("parse_config",)
    assert names(idx, "again with dry_run=false") == ["s0__trigger_run"]  # an option keeps its words


def test_a_quote_counts_as_text_not_as_its_words() -> None:
    idx = build(
        tool("verify_text_visible", "Verify that the text is visible on the page.", {"text": {}}),
        tool("place_order", "Place an order."),
        tool("list_orders", "List the orders placed."),
    )
    assert names(idx, "fail unless 'Order placed' shows up") == ["s0__verify_text_visible"]
    assert names(idx, 'fail unless "Order placed" shows up') == ["s0__verify_text_visible"]
    assert names(idx, "fail unless `Order placed` shows up") == ["s0__verify_text_visible"]
    assert names(idx, "fail unless \u201cOrder placed\u201d shows up") == ["s0__verify_text_visible"]
    assert idx.search("see 'Order placed', then", 1)[0].matched == ("Order placed",)
    assert names(idx, "'place an order'") == ["s0__place_order"]  # all one quote: the query itself
    # an apostrophe opens no quote: `users'` and `it's` leave the words between them alone
    assert names(idx, "the users' orders placed, it's those") == ["s0__list_orders"]


def test_a_value_after_every_asks_for_the_plural() -> None:
    idx = build(
        tool("read_file", "Read a file.", {"path": {}}),
        tool("search_files", "Search for files by a pattern.", {"pattern": {}}),
    )
    assert names(idx, "package.json") == ["s0__read_file"]
    assert names(idx, "every package.json") == ["s0__search_files"]
    assert names(idx, "all *.test.js") == ["s0__search_files"]


def test_what_was_done_and_a_passive_get_ask_for_no_tool_that_does_it() -> None:
    idx = build(
        tool("create_gist", "Create a gist."),
        tool("list_gists", "List gists of a user."),
        tool("get_notifications", "Get notifications."),
        tool("manage_subscription", "Manage a repository's subscription: stop notifications (pings)."),
    )
    assert names(idx, "gists I made") == ["s0__list_gists"]  # `made` says which gists
    assert names(idx, "the gists somebody created") == ["s0__list_gists"]
    assert names(idx, "make gists") == ["s0__create_gist"]  # the verb itself still asks
    assert names(idx, "stop getting pinged") == ["s0__manage_subscription"]  # `get` as `be`
    assert names(idx, "get notifications") == ["s0__get_notifications"]


def test_names_in_a_request_ask_for_entities_below_any_word() -> None:
    idx = build(
        tool("create_entities", "Create entities in the knowledge graph."),
        tool("list_teams", "List the teams of an organization."),
        tool("current_time", "Get the current time in a timezone."),
    )
    assert names(idx, "Remember that Dana Liu leads Payments") == ["s0__create_entities"]
    assert names(idx, "remember that dana leads payments") == []  # no capitals, no names
    assert names(idx, "what time is it in Sydney") == ["s0__current_time"]  # one name: a place
    assert names(idx, "Remember that Dana Liu leads the Payments team") == ["s0__list_teams"]  # a word beats it
    assert names(idx, "Dana. Liu: Payments") == []  # capitalised for a sentence's start only


def test_hostile_quotes_names_and_identifiers_cost_little() -> None:
    idx = build(tool("verify_text_visible", "Verify that the text is visible."))
    for hostile in ("'a " * 2_000, "'" * 4_096, "Dana " * 1_000, "a_b( " * 1_000, "I made " * 600):
        began = time.process_time()
        idx.search(hostile, 5)
        assert time.process_time() - began < 0.5


def words_of(query: str) -> dict[str, float]:
    """The query's words as an index that knows none of them whole reads them: stem -> weight."""
    return {word.term: word.weight for word in search._query(query, lambda _: False)}


def test_a_subordinate_clause_counts_less_than_the_main_one() -> None:
    idx = build(
        tool("update_pull_request", "Update a pull request: its title, body or state (open, closed)."),
        tool("merge_pull_request", "Merge a pull request."),
        tool("assign_copilot", "Assign Copilot to an issue."),
        tool("create_pull_request", "Create a pull request."),
    )
    merge = stem("merge")
    assert words_of("close PR 9 without merging")[merge] == search._MINOR
    assert words_of("merge PR 9")[merge] == 1.0
    assert words_of("hand this bug to copilot so it opens a PR")[stem("open")] == search._MINOR
    assert words_of("so far the build failed")[stem("build")] == 1.0  # `so far` opens no purpose
    # the clause ends at its comma: what follows is the main clause's again
    assert words_of("without merging, update the PR")[stem("update")] == 1.0
    # a word met in the subordinate clause and then in the main one counts in full
    assert words_of("because the merge failed; merge it")[merge] == 1.0
    assert names(idx, "hand this bug to copilot so it opens a pull request") == ["s0__assign_copilot"]


def test_a_context_sentence_counts_less_than_the_request() -> None:
    idx = build(
        tool("get_job_logs", "Get the logs of a workflow job.", {"job_id": {}}),
        tool("list_workflow_runs", "List the runs of a CI build workflow."),
        tool("localstorage_get", "Get a value from the page's localStorage."),
        tool("cookie_list", "List the cookies of the page."),
    )
    build_word = stem("build")
    words = words_of("The CI build went red. Show me the error logs.")
    assert words[build_word] == search._MINOR and words[stem("log")] == 1.0
    assert names(idx, "The CI build run went red. Show me the job logs.") == ["s0__get_job_logs"]
    # a question is a request, and so is saying what is wanted
    assert words_of("which value is stored? it's not in cookies")[stem("cooky")] == search._MINOR
    assert words_of("the CI build broke. I want the logs")[build_word] == search._MINOR
    assert words_of("the CI build broke \u2014 can you please show the logs")[build_word] == search._MINOR
    # no request among the sentences, one sentence, or a request that points back with a pronoun
    assert words_of("the CI build broke. the logs are long.")[build_word] == 1.0
    assert words_of("the CI build broke, show the logs")[build_word] == 1.0  # a comma ends no sentence
    assert words_of("QA wants a recording of the build \u2014 capture it")[build_word] == 1.0


def test_pronouns_name_nothing() -> None:
    assert stem("them") not in words_of("back them out")
    assert {"he", "their"}.isdisjoint(words_of("he asked for their username"))


def test_get_before_a_noun_in_ed_still_gets_it() -> None:
    idx = build(
        tool("get_feed", "Get the news feed."),
        tool("manage_subscription", "Manage a repository's subscription: stop notifications (pings)."),
    )
    assert stem("get") in words_of("get feed") and stem("get") in words_of("get the speed")
    assert stem("get") in words_of("get embed code")
    assert stem("get") not in words_of("getting pinged") and stem("get") not in words_of("got merged")
    assert names(idx, "get feed") == ["s0__get_feed"]


def test_an_html_element_counts_as_element_and_a_point_as_position() -> None:
    idx = build(
        tool("evaluate", "Evaluate JavaScript on the page or an element.", {"element": {}, "function": {}}),
        tool("take_screenshot", "Take a screenshot image of the page."),
        tool("mouse_click_xy", "Click the mouse at a given position.", {"x": {}, "y": {}}),
        tool("click", "Click an element on the page.", {"element": {}}),
        tool("show_commit", "Show a commit.", {"sha": {}}),
    )
    assert names(idx, "the img on the page") == ["s0__take_screenshot"]  # an image
    assert set(names(idx, "the <img> on the page", 2)) == {"s0__evaluate", "s0__click"}  # an element
    assert stem("element") in words_of("wrap it in </div>")
    assert stem("element") not in words_of("git show <sha>")  # a placeholder is no element
    assert names(idx, "tap at x 40 y 80") == ["s0__mouse_click_xy"]
    for point in ("click x=40, y=80", "click x: 40 y: 80", "x 1280 y 720"):
        assert search._POSITION in words_of(point), point
    assert search._POSITION not in words_of("the box 40 by 80")


def test_hostile_clauses_and_points_cost_little() -> None:
    idx = build(tool("verify_text_visible", "Verify that the text is visible."))
    hostile = (
        "without " * 1_000,
        "so I " * 1_000,
        "show it. " * 1_000,
        "x " * 2_000,
        "x 1 y " * 800,
        "x=1, " * 1_000,
        "<img " * 1_000,
        "\u2014 " * 2_000,
    )
    for query in hostile:
        began = time.process_time()
        idx.search(query, 5)
        assert time.process_time() - began < 0.5


def test_the_vocabulary_of_tool_tasks_meets_the_words_tools_use() -> None:
    idx = build(
        tool("manage_notification_subscription", "Manage notification subscription."),
        tool("list_dependabot_alerts", "List dependabot alerts.", {"severity": {}}),
        tool("advisories", "List security advisories."),
        tool("start_video", "Start video recording."),
        tool("handle_dialog", "Handle a dialog."),
        tool("create_gist", "Create a gist."),
        tool("merge_pull_request", "Merge a pull request."),
        tool("get_sum", "Adds two numbers and returns their sum.", {"a": {}, "b": {}}),
        tool("directory_tree", "Get a recursive tree of files."),
        tool("add_observations", "Add observations to entities."),
        tool("list_directory_with_sizes", "List the entries of a directory with their sizes."),
    )
    assert names(idx, "too many pings") == ["s0__manage_notification_subscription"]
    assert names(idx, "known vulnerable packages") == ["s0__advisories"]
    assert names(idx, "screencast the session") == ["s0__start_video"]
    assert names(idx, "accept the confirm box") == ["s0__handle_dialog"]
    assert names(idx, "a paste link for this snippet") == ["s0__create_gist"]
    assert names(idx, "squash and land it") == ["s0__merge_pull_request"]
    assert names(idx, "17 plus 25") == ["s0__get_sum"]
    assert names(idx, "the folder layout") == ["s0__directory_tree"]
    assert names(idx, "note this fact") == ["s0__add_observations"]
    assert names(idx, "what eats the most space") == ["s0__list_directory_with_sizes"]


def test_a_time_of_day_and_a_zone_count_as_time_and_timezone() -> None:
    idx = build(
        tool("convert_time", "Convert time between timezones.", {"time": {}, "source_timezone": {}}),
        tool("add_numbers", "Add two numbers.", {"a": {}, "b": {}}),
        tool("am_radio", "Tune the AM radio."),
    )
    for query in ("8am PST in IST?", "17:00 CET", "5:30pm"):
        assert names(idx, query) == ["s0__convert_time"], query
    assert idx.search("8am PST", 1)[0].matched == ("8am", "PST")
    assert names(idx, "pst") == []  # a zone's abbreviation in capitals only: `est` is a word's stem
    assert names(idx, "17 and 25") == []  # a bare number is still no word


def test_a_phrasal_verb_counts_as_the_verb_it_means() -> None:
    idx = build(
        tool("disable_alerts", "Disable the alerts."),
        tool("enable_alerts", "Enable the alerts."),
        tool("turn_page", "Turn to the next page."),
        tool("undo_change", "Undo the last change."),
        tool("take_photo", "Take a photo."),
    )
    assert names(idx, "turn off the alerts") == ["s0__disable_alerts"]
    assert names(idx, "the alerts: switched them on") == ["s0__enable_alerts"]  # any form, past a pronoun
    assert names(idx, "oops, take it back") == ["s0__undo_change"]
    assert names(idx, "take a photo") == ["s0__take_photo"]  # `take` alone is `take`
    assert names(idx, "turn the page") == ["s0__turn_page"]
    assert names(idx, "turn, off", 5) == ["s0__turn_page"]  # a comma parts them: no phrase
    assert search._PHRASES[(stem("signed"), "off")] == "approve"  # `sign off on PR 14`


def test_a_number_inside_a_name_counts() -> None:
    idx = build(
        tool("read_media", "Read a file as base64-encoded data."),
        tool("set_base", "Set the base path."),
    )
    assert names(idx, "the bytes as base64") == ["s0__read_media"]
    assert names(idx, "base 64") == ["s0__set_base"]  # a bare number stays a value


def test_contractions_and_possessives_leave_nothing_behind() -> None:
    idx = build(
        tool("list_pages", "List the pages."),
        tool("restart_service", "Restart a service: re-run it.", {"ve": {}, "ll": {}}),
    )
    assert [hit.matched for hit in idx.search("the page's title", 1)] == [("page",)]
    assert idx.search("I've we'll", 3) == []  # `ve`, `ll`: what contractions leave is no word


def test_two_words_the_index_knows_as_one_replace_both() -> None:
    idx = build(
        tool("lookup_user", "Find a user.", {}),
        tool("look_at_page", "Look at the page.", {}),
        tool("up_arrow", "Press the up arrow.", {}),
    )
    hit = idx.search("look up a user", 1)[0]
    assert hit.name == "s0__lookup_user" and hit.matched == ("look up", "user")
    # neither `look` nor `up` counts on its own any more: `look` only as a synonym of `lookup`
    assert names(idx, "look up a user", 3) == ["s0__lookup_user", "s0__look_at_page"]


def test_a_relative_form_counts_at_a_discount_below_the_word_itself() -> None:
    idx = build(
        tool("rebuild_index", "Rebuild the index."),
        tool("configure_indexer", "Configure the indexer."),
        tool("file_watcher", "Watch files for changes."),
        tool("watch_folder", "Follow a folder."),
    )
    assert names(idx, "indexer", 2) == ["s0__configure_indexer", "s0__rebuild_index"]
    assert score(idx, "indexer", "rebuild_index") < score(idx, "indexer", "configure_indexer")
    assert names(idx, "restart the watcher") == ["s0__file_watcher"]
    assert "s0__watch_folder" in names(idx, "restart the watcher", 3)  # `watcher` finds `watch` too
    assert names(idx, "subfolders") == ["s0__watch_folder"]  # a sub-word finds its word


def test_a_synonym_counts_below_the_word_itself() -> None:
    idx = build(
        tool("delete_file", "Delete a file.", {"path": {}}),
        tool("remove_file", "Remove a file.", {"path": {}}),
    )
    assert names(idx, "delete file", 2) == ["s0__delete_file", "s0__remove_file"]
    assert names(idx, "remove file", 2) == ["s0__remove_file", "s0__delete_file"]
    assert score(idx, "delete file", "remove_file") < score(idx, "delete file", "delete_file")


def test_a_tool_that_covers_the_whole_query_beats_one_that_repeats_a_word() -> None:
    idx = build(
        tool("commit", "Commit the staged changes. A commit records them.", {"commit_message": {}}, title="Commit"),
        tool("list_history", "Each commit of a branch, newest first.", {"branch": {}}),
        tool("create_branch", "Create a branch.", {"branch": {}}),
        tool("delete_branch", "Delete a branch.", {"branch": {}}),
        tool("rename_branch", "Rename a branch.", {"branch": {}}),
        *(tool(f"other_{i}", f"Something else entirely, number {i}.", {}) for i in range(6)),
    )
    # `commit` alone sums more in `commit` (name, title, description, parameter) than `commit` and
    # `branch` in list_history, but list_history answers the whole query
    assert names(idx, "commit on a branch", 2) == ["s0__list_history", "s0__commit"]
    # half the query covered: half the sum
    assert score(idx, "commit on a branch", "commit") == pytest.approx(score(idx, "commit", "commit") / 2, rel=1e-3)


def test_a_tool_named_for_the_task_gets_the_names_prior(monkeypatch: pytest.MonkeyPatch) -> None:
    tools = (
        tool("delete_file", "Delete a file.", {}),
        tool("write_file", "Write a file.", {}),
        tool("git_show", "Show a file.", {}),
    )
    assert names(build(*tools), "remove a file") == ["s0__delete_file"]
    prior = {hit.name: hit.score for hit in build(*tools).search("remove a file", 3)}
    monkeypatch.setattr(search, "_NAME_PRIOR", 0.0)
    plain = {hit.name: hit.score for hit in build(*tools).search("remove a file", 3)}
    # verb (by synonym) and object: the whole prior; one of two name words: half of it; a name of
    # one word covered counts as half a name (a verb alone is no verb and object)
    assert prior["s0__delete_file"] == pytest.approx(plain["s0__delete_file"] * 1.3, rel=1e-3)
    assert prior["s0__write_file"] == pytest.approx(plain["s0__write_file"] * 1.15, rel=1e-3)
    assert build(*tools).search("display", 1)[0].name == "s0__git_show"
    assert {h.name: h.score for h in build(*tools).search("display", 3)}["s0__git_show"] > 0


def test_question_words_ask_for_their_intent_below_any_query_word() -> None:
    idx = build(
        tool("get_me", "Get my user profile.", {}),
        tool("get_repo", "Get a repository's details.", {}),
        tool("list_branches", "Branches of a repository.", {}),
        tool("get_branch", "Get one branch by name.", {}),
        tool("current_time", "The current time in a timezone.", {}),
        tool("set_alarm", "Set an alarm for a time of day.", {}),
    )
    assert names(idx, "who am I signed in as") == ["s0__get_me"]  # who: people
    who = idx.search("who am I signed in as", 1)[0]
    assert 0 < who.score < score(idx, "user", "get_me") and who.matched == ()  # below the word itself
    assert names(idx, "which branches exist") == ["s0__list_branches"]  # which + plural: a list
    assert score(idx, "which branches exist", "list_branches") > score(idx, "branches exist", "list_branches")
    hit = idx.search("who owns the repository", 1)[0]
    assert hit.name == "s0__get_repo" and hit.matched == ("repository",)  # the intent is not a matched word
    # only a question word that opens the query (or a clause) asks: "when" here is a condition
    assert "s0__current_time" not in names(idx, "set an alarm when the build ends", 2)
    assert "s0__current_time" in names(idx, "the build, when does it end", 2)


def test_a_query_that_asks_to_read_demotes_tools_that_act_with_a_verb_it_does_not_ask_for() -> None:
    idx = build(
        tool("cookie_set", "Set a cookie.", {"name": {}, "domain": {"description": "The site it is for."}}),
        tool("cookie_list", "List all cookies of the browser.", {}),
        tool("cookie_delete", "Delete a cookie.", {"name": {}}),
        *(tool(f"other_{i}", f"Something else entirely, number {i}.", {}) for i in range(6)),
    )
    # a question, or a request to see, asks to read: a tool whose name acts (set, delete) with a
    # verb the query does not reach scores half
    for reading in ("what about the site's cookies", "the site's cookies?", "show the site's cookies"):
        assert score(idx, reading, "cookie_set") == pytest.approx(
            score(idx, "the site's cookies", "cookie_set") * search._UNASKED_ACTION, rel=1e-3
        )
    assert score(idx, "show the site's cookies", "cookie_list") == pytest.approx(
        score(idx, "the site's cookies", "cookie_list"), rel=1e-3
    )  # a read verb's tool is not demoted
    # the verb asked for, by itself or by a synonym (remove: delete), keeps its tool where it was;
    # the other acting tool falls below the one that reads
    assert names(idx, "which cookie should I delete", 3) == ["s0__cookie_delete", "s0__cookie_list", "s0__cookie_set"]
    assert names(idx, "can I remove cookies?", 3) == ["s0__cookie_delete", "s0__cookie_list", "s0__cookie_set"]
    assert score(idx, "can I remove cookies?", "cookie_delete") == pytest.approx(
        score(idx, "remove cookies", "cookie_delete"), rel=1e-3
    )
    # a query that may ask to act is left alone: how to act, or no question at all
    assert score(idx, "how do I set a cookie for the site", "cookie_set") == pytest.approx(
        score(idx, "set a cookie for the site", "cookie_set"), rel=1e-3
    )
    assert score(idx, "cookies of the site", "cookie_set") == pytest.approx(
        score(idx, "the site's cookies", "cookie_set"), rel=1e-3
    )


@pytest.mark.parametrize(
    ("query", "reads"),
    [
        ("what time is it", True),
        ("What's staged", True),
        ("which branches exist", True),
        ("is the folder there", True),
        ("how many files are open", True),
        ("the open issues?", True),
        ("show me config.yaml", True),
        ("list my gists", True),
        ("how do I delete a branch", False),
        ("how to reset the index", False),
        ("delete the branch", False),
        ("open issues", False),
        ("", False),
    ],
)
def test_what_asks_to_read(query: str, reads: bool) -> None:
    assert search._reads(query) is reads


def test_a_deprecated_tool_comes_after_its_replacement() -> None:
    idx = build(
        tool("read_file", "Read the contents of a file as text. DEPRECATED: Use read_text_file instead.", {"path": {}}),
        tool("read_text_file", "Read the complete contents of a file from the file system as text.", {"path": {}}),
    )
    assert names(idx, "read a file", 2) == ["s0__read_text_file", "s0__read_file"]
    for text, deprecated in [
        ("DEPRECATED: use other_tool.", True),
        ("Old. Deprecated since 2.0", True),
        ("(deprecated) Lists things.", True),
        ("This tool is now deprecated.", True),
        ("Lists deprecated APIs of a module.", False),
        ("Says whether an API is deprecated.", False),
    ]:
        assert bool(search._DEPRECATED_TEXT.search(text)) is deprecated, text
    titled = build(
        tool("old_read", "Read a file.", {"path": {}}, title="Read (deprecated)"),
        tool("new_read", "Read a file.", {"path": {}}, title="Read"),
    )
    assert names(titled, "read a file", 2) == ["s0__new_read", "s0__old_read"]


def test_the_order_is_one_order_whatever_k_and_input_order() -> None:
    defs = [
        tool(f"{verb}_{noun}", f"{verb.title()} the {noun} of a project.", {noun: {}})
        for verb in ("get", "list", "create", "delete", "update", "search")
        for noun in ("file", "issue", "branch", "user", "page", "table", "record", "job", "note", "tag")
    ]
    first = build(*defs)
    shuffled = list(defs)
    random.Random(7).shuffle(shuffled)
    second = build(*shuffled)
    for query in ("get the file of a project", "remove a project branch", "find project users on a page", "list tags"):
        full = names(first, query, 60)
        assert names(second, query, 60) == full  # the index's input order does not matter
        assert len(full) > 50 or "project" not in query  # more than the pool that is re-scored first
        for k in (1, 3, 10, 25, 51):
            assert names(first, query, k) == full[:k]  # any k is a prefix of the one order
        assert first.search(query, 60) == first.search(query, 60)
        shown = [hit.score for hit in first.search(query, 60)]  # past the re-scored fifty too
        assert shown == sorted(shown, reverse=True)


def test_a_parameters_enum_values_are_read_as_its_text() -> None:
    """A tool that does several things by an `action` is found by the thing asked for."""
    actions = {"type": "string", "enum": ["create_issue", "close_issue", "list_labels", 7, "x" * 10_000]}
    idx = build(
        tool("github", "Work with a repository.", {"action": actions}),
        tool("create_folder", "Make a new folder.", {"path": {}}),
        tool("read_file", "Read a file.", {"path": {}}),
    )
    assert names(idx, "close the issue", 1) == ["s0__github"]
    assert names(idx, "which labels are there", 1) == ["s0__github"]
    assert names(idx, "make a folder", 1) == ["s0__create_folder"]  # the other tools as before
    many = {"type": "string", "enum": ["walrus"] + ["value"] * 998 + ["zebra"]}
    idx = build(tool("wide", "Many values.", {"v": many}))
    assert names(idx, "walrus", 1) == ["s0__wide"]
    assert names(idx, "zebra", 1) == []  # only the first values are read: the work per tool is bounded


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("pretend the network is offline", "emulate_network"),  # standing in for the real thing
        ("fake the response of the orders endpoint", "mock_route"),
        ("ask the user for their name", "elicit_input"),  # asking someone for something
        ("prompt the user to confirm", "elicit_input"),
        ("approve pull request 8", "submit_review"),  # an approval is a review's verdict
        ("put an LGTM on PR 8", "submit_review"),
        ("capture what the page looks like", "take_screenshot"),  # a screen captured, still or moving
        ("capture a recording of the session", "start_video"),
        ("set the folder to work in", "set_base_path"),  # a folder is named by its path
    ],
)
def test_general_developer_vocabulary_reaches_the_tools_words(query: str, expected: str) -> None:
    """The groups added for the words users bring for a developer tool's action or object."""
    idx = build(
        tool("emulate_network", "Emulate network conditions such as offline mode.", {"offline": {}}),
        tool("mock_route", "Mock the response of matching requests.", {"url": {}}),
        tool("elicit_input", "Elicit input from the user through a form.", {"schema": {}}),
        tool("submit_review", "Submit a review on a pull request.", {"event": {}}),
        tool("merge_pull_request", "Merge a pull request.", {"number": {}}),
        tool("take_screenshot", "Take a screenshot of the page.", {"full_page": {}}),
        tool("start_video", "Start recording a video of the browser.", {"size": {}}),
        tool("set_base_path", "Set the base path for indexing.", {"path": {}}),
        tool("read_page", "Read the page's text.", {"url": {}}),
        tool("send_message", "Send a message to the user.", {"text": {}}),
    )
    assert names(idx, query) == [f"s0__{expected}"]


@pytest.mark.parametrize(
    ("word", "group"),
    [
        ("pretend", ("mock", "emulate", "simulate", "fake", "stub")),
        ("ask", ("elicit", "elicitation", "prompt")),
        ("lgtm", ("review", "approve", "approval")),
        ("capture", ("screenshot", "image", "video", "record")),
        ("path", ("folder", "directory")),
    ],
)
def test_the_new_groups_relate_both_ways(word: str, group: tuple[str, ...]) -> None:
    for other in group:
        assert stem(other) in related(stem(word)) and stem(word) in related(stem(other))


def test_a_synonyms_match_counts_less_than_the_words_own_but_more_than_half() -> None:
    """The word itself first; a synonym's match is worth 0.7 of it (a group's words share a sense)."""
    assert 0.5 < search._SYNONYM < 1.0
    idx = build(
        tool("delete_folder", "Delete a folder.", {"path": {}}),
        tool("remove_folder", "Remove a folder.", {"path": {}}),
    )
    hits = idx.search("remove folder", 2)
    assert [h.name for h in hits] == ["s0__remove_folder", "s0__delete_folder"]
    assert hits[0].score > hits[1].score
    matches, own, _ = idx._matches(stem("remove"))
    deleting = idx._names.index("s0__delete_folder")
    assert deleting not in own
    assert matches[deleting] == pytest.approx(search._SYNONYM * idx._postings[stem("delete")][deleting])


def test_a_question_about_what_was_done_asks_for_the_change_not_for_a_tool_that_changes() -> None:
    idx = build(
        tool("edit_file", "Edit a file: change its lines.", {"path": {}}),
        tool("git_show", "Show a commit's changes.", {"revision": {}}),
    )
    # The past form in a question about the past counts by the word itself (both tools have it),
    # not by its synonyms and the name they make (`edit`): without the rule `edit_file` came first.
    assert names(idx, "what changed in v2.1", 2) == ["s0__git_show", "s0__edit_file"]
    assert names(idx, "who changed it", 2)[0] == "s0__git_show"
    assert idx.search("what changed", 1)[0].matched == ("changed",)
    assert names(idx, "change the lines")[0] == "s0__edit_file"  # a request to change
    assert names(idx, "how do I change a line")[0] == "s0__edit_file"  # how to: a request too
    assert names(idx, "Then change it. What changed?")[0] == "s0__edit_file"  # the question comes second


def test_consumer_services_are_found_by_their_domains_words() -> None:
    # a catalog of services as their descriptions put them; each request in a user's other word
    idx = build(
        tool("job_board", "Find job openings near you."),
        tool("fx", "Convert between currencies at today's rates."),
        tool("trip_planner", "Plan a trip: routes, stays and sights."),
        tool("film_finder", "Showtimes and reviews for any film."),
        tool("shop", "Purchase products from thousands of stores."),
    )
    assert names(idx, "any vacancies for a nurse in Leeds") == ["s0__job_board"]
    assert names(idx, "how much money is 20 euros in dollars") == ["s0__fx"]
    assert names(idx, "ideas for our summer vacation") == ["s0__trip_planner"]
    assert names(idx, "what movie is on tonight") == ["s0__film_finder"]
    assert names(idx, "buy a new kettle") == ["s0__shop"]
