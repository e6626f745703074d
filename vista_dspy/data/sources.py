"""Where each dataset comes from: its files at a pinned commit of the authors' public repository, each with the
sha256 and size `vista data get` checks, and the files built from them (the human re-annotation's halves, the RGM
dialogues). Relative paths are the same in the cache, in a data directory (``--data-dir``) and in a mirror
(``--from``). The hashes were computed from byte copies of the upstream files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RemoteFile:
    """One file fetched from its public home. ``sha256`` None: not pinned (no hash could be learned offline); the
    first fetch records its hash and size, and a later fetch that differs is refused. ``member``: the file is that
    member of the archive at ``url`` (the archive itself is not kept)."""

    path: str
    url: str
    sha256: str | None
    size: int | None
    member: str | None = None


@dataclass(frozen=True)
class BuiltFile:
    """A file made from a dataset's fetched files (by ``Dataset.build``), checked against its own sha256."""

    path: str
    sha256: str
    size: int | None = None


@dataclass(frozen=True)
class Dataset:
    name: str
    path: str  # what the loader reads, relative to the cache or a data directory
    source: str  # repository@commit, or where else it lives
    licence: str
    measures: str
    files: tuple[RemoteFile, ...] = ()
    built: tuple[BuiltFile, ...] = ()
    build: Callable[[Path, tuple[BuiltFile, ...]], dict[str, bytes]] | None = None  # root -> {path: bytes}
    hub: str | None = None  # a Hugging Face hub id the loader can read instead (`vista data get --source hub`)
    hub_parts: tuple[tuple[str | None, str], ...] = ()  # (config, split) of ``hub`` that the loader reads
    note: str = ""

    @property
    def kept(self) -> tuple[RemoteFile | BuiltFile, ...]:
        """Every file that must be present and verified for the dataset to be usable."""
        return (*self.files, *self.built)

    @property
    def size(self) -> int | None:
        sizes = [f.size for f in self.kept]
        return None if None in sizes or not sizes else sum(sizes)  # type: ignore[arg-type]


def github(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def _files(repo: str, commit: str, folder: str, table: dict[str, tuple[str, int]]) -> tuple[RemoteFile, ...]:
    """``folder/path`` in the cache for each upstream ``path`` of ``repo`` at ``commit``: (sha256, size)."""
    return tuple(RemoteFile(f"{folder}/{path}", github(repo, commit, path), sha256, size)
                 for path, (sha256, size) in table.items())


# ---- VISTA's human re-annotation: the authors' full file, and the project's two halves of it ----------------------
VISTA_REPO, VISTA_COMMIT = "ashleylew/VISTA", "44250f49957b10291a24a68d1d0703968df0063a"
VISTA_FULL = RemoteFile("vista_human_eval/human_eval_VISTA_input.json",
                        github(VISTA_REPO, VISTA_COMMIT, "data/reannotated_data/human_eval_VISTA_input.json"),
                        "c6b24d31f76eb91985e08c113dd64b81bc9c43ef4cfa1153034c49d5f26a2c4d", 299_476)
DEV_HALF = BuiltFile("vista_human_eval/dev.json", "4671896ff1e9f8e6fef05226202c36bc161f8c1dff6f347b57a5b4a77e7a3529",
                     155_277)
HELDOUT_HALF = BuiltFile("vista_human_eval/heldout.json",
                         "d0a7597e951e02e534b5253fa5cff97d9eb3d9e14550cac47aaa6a97295a981b")


def build_halves(root: Path, wanted: tuple[BuiltFile, ...]) -> dict[str, bytes]:
    from .halves import halves_from_file

    dev, heldout = halves_from_file(root / VISTA_FULL.path)
    made = {DEV_HALF.path: dev, HELDOUT_HALF.path: heldout}
    return {f.path: made[f.path] for f in wanted}


_VISTA = dict(source=f"{VISTA_REPO}@{VISTA_COMMIT[:12]}", licence="none stated (public research release)",
              files=(VISTA_FULL,), build=build_halves)
_HALF_RULE = "per source dataset, conversations by conversation_id: 1st, 3rd, ... = development half"

# ---- BEGIN (google/BEGIN-dataset, v2 release) -----------------------------------------------------------------------
BEGIN = _files("google/BEGIN-dataset", "6e65f0d5a1ed1b9574643a7640ff1678d4e979b5", "begin", {
    "wow/begin_test_wow.tsv": ("d5c106a42042c3abd481563f1157e07c95c107dbcdf67f23564d874e8a4d6e7e", 1241097),
    "wow/begin_dev_wow.tsv": ("2ebfc95a1ff267e12dcce3250da4d158e1811c62e9e1a0d56f110efc9ace0178", 147417),
    "cmu-dog/begin_dev_cmu.tsv": ("9482294df23cf08a976773ca73203b84f7178534ecab1a206eaade365e97071c", 531393),
    "topicalchat/begin_dev_tc.tsv": ("d799a8cb3635de41b7f284dcfc872544ddeadcbae0c2ffd684270cce671f7711", 656931),
    "LICENSE": ("cd97aa30978e6090d3af8fccd93c880da19889f52de065c256538479ae1a057f", 107),
    "wow/LICENSE": ("5cae4a69c3c71bfec6251130e2a413bcaea051467f9805c2580dcf771a76361f", 18566),
    "wow/NOTICE": ("3206f4c41ec756667ee8cd0300fd6114fc5bfb370799b46cdf9d3050fcc9a938", 19286),
    "cmu-dog/LICENSE": ("5cae4a69c3c71bfec6251130e2a413bcaea051467f9805c2580dcf771a76361f", 18566),
    "cmu-dog/NOTICE": ("b8dcafc36b2f61facc33512c323e44b44da5c461e501ed580b3bc90ef23a9079", 2626),
    "topicalchat/LICENSE": ("94b1f359428afa5c7d1f3230e0cb4a5d51be6c9be12c2249e2b33e8fc489eba3", 11349),
    "topicalchat/NOTICE": ("543150a8b878961db87ae6c4a4055c4b7199253eaafbbadb67558716a25aebd9", 11980),
})

# ---- FADE (souvikdgp16/FADE) ----------------------------------------------------------------------------------------
FADE = _files("souvikdgp16/FADE", "db581a1b677de1626da713a1fb2417d8507c16f1", "fade", {
    "data/human_verified_500.csv": ("7a4d7d14ee1efe84b24c08732ab73f6598d3b5fc632a0c1a3464ce6cb09ea5e7", 402097),
    "LICENSE": ("ea2cf01c03494ea9c58c7ce0b25a318e881f619462854ba00510de960bb9ad89", 1067),
})

# ---- FaithDial's data audit (McGill-NLP/FaithDial data-audit/, not the FaithDial benchmark) ------------------------
FAITHDIAL_AUDIT = _files("McGill-NLP/FaithDial", "25671c6e3aa7d667943b7744a2b91507e7187f83", "faithdial", {
    "data-audit/README.md": ("bb8bb8582a46bc1b2ee6318d882bba42e6040d8330f2293df55615c63d56168d", 828),
    "data-audit/CTRL/ctrl_processed_cmu.csv": ("fdf6b4fd326cc9c0b7222f4a2c3a6a7b8943ec4feda195adc727b86e11a86664",
                                               251638),
    "data-audit/CTRL/ctrl_processed_topicalchat.csv": (
        "b6c6ed1c3bfeb2578dab05ab694482047119b16ff0e3350b88f6a2f86605b201", 304084),
    "data-audit/CTRL/ctrl_processed_wow.csv": ("a547b236b5ab7bd64a93fe6aeb6e2886bd2239e370538563abdd3667c92b5700",
                                               71046),
    "data-audit/DoHA/doha_processed_cmu.csv": ("20f4e75021bd18f03fb3acc073acf90cde47250b6177ae2cdb1bef17604f2e77",
                                               250546),
    "data-audit/DoHA/doha_processed_topical.csv": (
        "ac2f9a6edb1514b18ce034f1b3ea0f4e68f765cbde4d87f0b6c7ebdd6b5c44b6", 296984),
    "data-audit/DoHA/doha_processed_wow.csv": ("45fd23f61e77735169cf693dd7f4eabc0c07c0a855433584f88cd0f85e801929",
                                               63144),
    "data-audit/GPT2/gpt2_processed_cmu.csv": ("a74c0a9ebfa1603a293b7ffae27b6498fd8f112079c5830b0ac7d48a59c3e5b6",
                                               246479),
    "data-audit/GPT2/gpt2_processed_topical.csv": (
        "7d13fa3258783f76f63963e9aab0a2dc5668003d74b246a8fbda6da6f7be7255", 305611),
    "data-audit/GPT2/gpt2_processed_wow.csv": ("a74dcc1b8427fb91ce1b173b2ce98a6ed06560299dd9db544e8976d3b6237987",
                                               69189),
    "data-audit/gold/cmu.csv": ("91aff154c342c1a9c4c74c24c6ef067efca17719e64aa0969419fdbb8d57c9cb", 275728),
    "data-audit/gold/topical.csv": ("4bd585d91e2c2e591220d3167fe6e1806c335d8870414833f32a0fd564f9fdec", 362859),
    "data-audit/gold/wow.csv": ("0237ccc1472e9426e3e6631bb3cb8dbbbc7c7083190f633a7db81672992127aa", 70445),
    "LICENSE": ("237b7285cdd6191afd93bcc877ba14cb566276e85ee8025af0555ee54b0145ab", 1068),
})

# ---- AIS (google-research-datasets/AIS), joined with Wizard of Wikipedia's test file from ParlAI ------------------
WOW_ARCHIVE = "http://parl.ai/downloads/wizard_of_wikipedia/wizard_of_wikipedia.tgz"
AIS = (*_files("google-research-datasets/AIS", "d3c826d0ab3323fb6f0e17e4414abde98f91bb06", "ais", {
    "ann_wow.csv": ("56177e2ae4e5c95510caaca50a8eabd6dcba1370e525b6d631a3d048468704cc", 181293),
    "LICENSE": ("9ba9550ad48438d0836ddab3da480b3b69ffa0aac7b7878b5a0039e7ab429411", 18657),
}), RemoteFile("ais/test_random_split.json", WOW_ARCHIVE, None, None, member="test_random_split.json"))

# ---- CoCoNot (allenai/noncompliance); the refusals come from an earlier commit -------------------------------------
COCONOT_REPO, COCONOT_COMMIT = "allenai/noncompliance", "25bf77cc668814360405cdb8197c4368205806c7"
COCONOT = (*_files(COCONOT_REPO, COCONOT_COMMIT, "coconot", {
    "data/coconot_pref.jsonl": ("3b0cddcfb72218b8c32d7c11bfded00174f2f4a3c4edfbc862640fc63f43d9c2", 2574178),
    "data/coconot_eval.jsonl": ("df72466c477207f14a96c5940c3ef3b93b1b50c0d1e7ed7c5fb5dc6d6140c077", 209427),
    "data/coconot_contrast_eval.jsonl": ("76dccec176743ed656279f2969c51abb68bda94e5fda8397e34ff5638e021d86", 69278),
    "LICENSE": ("a511a08496fdcc850944964d06781345e545f0e2f4342bd7250bf0749a3415df", 1060),
}), RemoteFile("coconot/legacy_commit_3206be6/data/coconot_evaluation.jsonl",
               github(COCONOT_REPO, "3206be6c4c915e0f9968b50fbf10458add04678a", "data/coconot_evaluation.jsonl"),
               "84a8d98c3748c2a31e083698cfaa829d3076e2074b28ddbfc1e883f1e6c71249", 620925))

# ---- RGM contradictions (shiki-sato/rgm-contradiction): contexts + responses of the 3 released RGMs -> dataset/ ----
RGMS = ("blender3-30B", "blender3-3B", "opt-60B")
_RGM_CONTEXTS = {  # context file -> built dataset file, per RGM (as the repository's build_dataset.py names them)
    "contexts/indomain/contexts_indomain_test_{rgm}.jsonl": "dataset/indomain/indomain_test_{rgm}.jsonl",
    "contexts/outdomain_daily/contexts_outdomain_{rgm}.jsonl": "dataset/outdomain_daily/daily_test_{rgm}.jsonl",
    "contexts/outdomain_topical/contexts_outdomain_{rgm}.jsonl": "dataset/outdomain_topical/topical_test_{rgm}.jsonl",
}
RGM = _files("shiki-sato/rgm-contradiction", "e18dc8c3c052dbd6ef5aaa64d50f64877a210a63", "rgm_contradiction", {
    "contexts/indomain/contexts_indomain_test_blender3-30B.jsonl": (
        "9cfb469a073c1063ee132a2ad0bc5e49ac51f240ca7c5865d54aa2c599cc4dea", 173877),
    "contexts/indomain/contexts_indomain_test_blender3-3B.jsonl": (
        "d7d5414dffef5a8a29fb2e5aa5c3db6f11489aa81138ebe1a439910fc2ac9652", 162135),
    "contexts/indomain/contexts_indomain_test_opt-60B.jsonl": (
        "f598638b2635753f66588d191b3f62b1a2f06e74a5b7272fcc1685e67ee7866b", 157495),
    "contexts/outdomain_daily/contexts_outdomain_blender3-30B.jsonl": (
        "57295c12d4a517f8a03c20eb25df60aec62f95ac2b076c552395331200bc7998", 40819),
    "contexts/outdomain_daily/contexts_outdomain_blender3-3B.jsonl": (
        "fd4754d5f8f8b7deb604b57b6a9db723798bbbfde611006337c04a6d9e339546", 42910),
    "contexts/outdomain_daily/contexts_outdomain_opt-60B.jsonl": (
        "d3bea926abec24286d90c4fd10d3e9b7eb724dc6efab1386d0ee7fc6b80e58b6", 42508),
    "contexts/outdomain_topical/contexts_outdomain_blender3-30B.jsonl": (
        "d82484ca348bbe13af523698bf7e39caace485fca3d35f34d486fe8e3bffde01", 59139),
    "contexts/outdomain_topical/contexts_outdomain_blender3-3B.jsonl": (
        "833aa6a2efc390c7ac5a0ba9cbbd2d0d993db9eb03d741dda2400b0d09467f14", 57876),
    "contexts/outdomain_topical/contexts_outdomain_opt-60B.jsonl": (
        "4812cee3f82d28116495cefde30435795c3c8bfd596cbc387a148eb2e0b73c20", 55920),
    "contexts/indomain/README.md": ("9fbc5b6f1004ee6e8cc51b0f49bbe0c428164a98ae64e08b068264193dff8887", 483),
    "contexts/outdomain_daily/README.md": ("346adb5f691677f87f03f1c56f546790a75a44f3d2d128022ab1d678d976d377", 543),
    "contexts/outdomain_topical/README.md": ("595e8f17decff312589fa9fb457c1ea0344a9e4d03097e511acd2b9b36669d35",
                                             573),
    "responses/blender3-30B/blender3-30B.json": ("68d39c984a01e152bee0181ed1a5fb0c77708feef1172790ea16ac8d626b0206",
                                                 495161),
    "responses/blender3-3B/blender3-3B.json": ("ee0253804edb1f8ecc848f2e004147a2f528bcd61b8f53c07890178f0f057c0d",
                                               478118),
    "responses/opt-60B/opt-60B.json": ("acc973d1a4bb01891ccb24e6d4a1fb6049149eaabbdc02dda70a0e7dcdbb5f99", 474978),
    "responses/blender3-30B/README.md": ("c3f86197d86c1b3d001f4a328c1b82050a9c071645cda44f5723b61b9b89eb0f", 1267),
    "responses/blender3-3B/README.md": ("a37d920aff33148d2cfbe000b65ef856dd3af6061bb830f17489fb2e50eb6b76", 1266),
    "responses/opt-60B/README.md": ("ac1f3e5e720e29f56e39374ff0b36ef07d344d5d2e73c5b001b9f61973de34a1", 1289),
    "responses/blender3-30B/BB3_LICENSE.md": ("e14b2af829c9d94bfed5746f8979f169fa65dcd26cf9726eae04154180773e48",
                                              11098),
    "responses/blender3-3B/BB3_LICENSE.md": ("e14b2af829c9d94bfed5746f8979f169fa65dcd26cf9726eae04154180773e48",
                                             11098),
    "responses/opt-60B/OPT-175B_LICENSE.md": ("11203fa656a6dfd929ded198012b18d5d0f2b95e24d13298be37b70c327329a4",
                                              11117),
})
RGM_BUILT = tuple(BuiltFile(f"rgm_contradiction/{path}", sha256, size) for path, sha256, size in (
    ("dataset/indomain/indomain_test_blender3-30B.jsonl",
     "2849d3f732d7e509692729da0cbbdaeee45847a520aac18c56f7c1749dae540e", 192076),
    ("dataset/indomain/indomain_test_blender3-3B.jsonl",
     "748b238d551476c316658027dea3267bdf2f6fff58d7a107f4fa49e12cd4fee0", 178668),
    ("dataset/indomain/indomain_test_opt-60B.jsonl",
     "85d58771d1e9f0c99aa844c07c24dfc87b79502efe52578f672ff99200827276", 175219),
    ("dataset/outdomain_daily/daily_test_blender3-30B.jsonl",
     "0c2c340bf0baafd4cea9495525bc15fb0c4af9f63f7ad327ea63b50c310c294b", 46817),
    ("dataset/outdomain_daily/daily_test_blender3-3B.jsonl",
     "a73b634b2cb2577685a67dd3847a32cde1c1b3ade3b34ccfc32773c27c442458", 48999),
    ("dataset/outdomain_daily/daily_test_opt-60B.jsonl",
     "1b04005b1b0da4e02bf4a52e7f0c326941e501b15b875a23f649aefd8ce3614e", 45155),
    ("dataset/outdomain_topical/topical_test_blender3-30B.jsonl",
     "abededbb7cc6a0e5d541457af1f544f2eee0f03ebd580acd3f4ba2951d9329bc", 65312),
    ("dataset/outdomain_topical/topical_test_blender3-3B.jsonl",
     "947ef46bb2df604d5a94f07de1e8653f27cee51344eeca0f84ebe6a07fc04dc8", 64423),
    ("dataset/outdomain_topical/topical_test_opt-60B.jsonl",
     "2df177a4b6398a33cffb72a46e007793255b8c7b5fd7b771333f00e065abc0cb", 60838),
))


def build_rgm(root: Path, wanted: tuple[BuiltFile, ...]) -> dict[str, bytes]:
    """Each context's placeholder utterance (``[[rgm:N]]``) replaced by its RGM's response, one ``json.dumps``
    line per dialogue: the repository's own build step."""
    base = root / "rgm_contradiction"
    made: dict[str, bytes] = {}
    for rgm in RGMS:
        responses = json.loads((base / f"responses/{rgm}/{rgm}.json").read_bytes())
        for context, built in _RGM_CONTEXTS.items():
            lines = []
            for line in (base / context.format(rgm=rgm)).read_text(encoding="utf-8").splitlines():
                if line.strip():
                    record = json.loads(line)
                    record["utterances"] = [responses.get(u, u) for u in record["utterances"]]
                    lines.append(json.dumps(record) + "\n")
            made[f"rgm_contradiction/{built.format(rgm=rgm)}"] = "".join(lines).encode("utf-8")
    return {f.path: made[f.path] for f in wanted}


DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset("vista-human", DEV_HALF.path, built=(DEV_HALF,), measures="claim and turn factuality against human claim "
            "labels (VISTA's re-annotation): the development half, 70 conversations", note=_HALF_RULE, **_VISTA),
    Dataset("vista-human:dev-half", DEV_HALF.path, built=(DEV_HALF,), measures="the same development half, by its "
            "explicit name", note=_HALF_RULE, **_VISTA),
    Dataset("vista-human:heldout-half", HELDOUT_HALF.path, built=(HELDOUT_HALF,), measures="the held-out half "
            "(70 conversations no choice of the project saw)", note=_HALF_RULE, **_VISTA),
    Dataset("begin", "begin", source="google/BEGIN-dataset@6e65f0d5a1ed", files=BEGIN,
            licence="CC BY 4.0 (WoW, CMU-DoG additions); CDLA-Sharing 1.0 (TopicalChat)",
            measures="attribution of a model response to its knowledge snippet (WoW test, 3,607 turns)"),
    Dataset("fade", "fade", source="souvikdgp16/FADE@db581a1b677d", files=FADE,
            licence="MIT (OpenDialKG underneath: CC BY-NC 4.0)",
            measures="entity-level hallucinations injected into knowledge-grounded responses (500 verified)"),
    Dataset("faithdial-audit", "faithdial/data-audit", source="McGill-NLP/FaithDial@25671c6e3aa7",
            files=FAITHDIAL_AUDIT, licence="MIT",
            measures="BEGIN-labelled gold and model responses of WoW, CMU-DoG, TopicalChat (not FaithDial itself)"),
    Dataset("faithdial", "faithdial/data/test.json", source="Hugging Face hub McGill-NLP/FaithDial", licence="MIT",
            measures="faithfulness of Wizard-of-Wikipedia turns edited by FaithDial", hub="McGill-NLP/FaithDial",
            hub_parts=((None, "test"),),
            note="hub only: `vista data get faithdial --source hub`, or a local copy of data/test.json"),
    Dataset("ais", "ais", source="google-research-datasets/AIS@d3c826d0ab33 + ParlAI wizard_of_wikipedia.tgz",
            files=AIS, licence="CC BY 4.0 (AIS and Wizard of Wikipedia)",
            measures="attribution of WoW responses to the checked sentence (997 rated outputs)",
            note="test_random_split.json is not pinned: its hash and size are recorded at the first fetch"),
    Dataset("coconot", "coconot", source=f"{COCONOT_REPO}@{COCONOT_COMMIT[:12]} (+3206be6c4c91)", files=COCONOT,
            licence="MIT", measures="abstention: refusals to non-compliant requests vs compliant contrast answers",
            hub="allenai/coconot", hub_parts=(("original", "train"), ("pref", "train"))),
    Dataset("rgm-contradictions", "rgm_contradiction", source="shiki-sato/rgm-contradiction@e18dc8c3c052",
            files=RGM, built=RGM_BUILT, build=build_rgm,
            licence="mixed, non-commercial: CC BY 4.0 / CC BY-NC-SA 4.0 / CDLA-Sharing 1.0; BB3 and OPT-175B "
                    "licences for the responses",
            measures="contradiction of a speaker's earlier turn (1,200 dialogues, 3 released RGMs)"),
)}

__all__ = ["DATASETS", "BuiltFile", "Dataset", "RemoteFile", "build_halves", "build_rgm", "github"]
