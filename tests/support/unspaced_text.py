"""Japanese and Chinese prose written for these tests (not copied from anywhere), segmented into words by hand.

Each sentence is written with a space between words, as a word segmenter would cut it; `unspaced` removes the
spaces, giving the text as the language writes it. The hand segmentation measures how many characters a word has
(tests/test_pipeline/test_filter.py checks the profiles' filter.chars_per_word against it). GARBAGE_* are what the filter must
still drop: a bare list, a table of numbers, a one-line stub."""
from __future__ import annotations


def unspaced(segmented: list[str]) -> list[str]:
    return ["".join(s.split()) for s in segmented]


JA = {
    "山あいの村": [
        "山あい の 小さな 村 は 、 川 の 岸 に 沿って 細長く 広がって いる 。",
        "村 の 人口 は 約 八百 人 で 、 その 多く は 米 や 野菜 を 作る 農家 で ある 。",
        "古い 神社 は 江戸 時代 に 建て られ 、 その 後 何 度 も 修理 さ れて きた 。",
        "夏 に は 多く の 観光 客 が 訪れ 、 周り の 森 や 山 を 歩いて 楽しむ 。",
        "村 の 小学校 で は 約 五十 人 の 子ども が 学んで おり 、 先生 の 多く は 地元 の 出身 で ある 。",
    ],
    "みなと駅": [
        "みなと 駅 は 1925 年 に 開業 し 、 当時 は 木造 の 小さな 駅舎 だった 。",
        "現在 の 駅舎 は 1998 年 に 建て替え られた もの で 、 二 階 に は 図書館 が ある 。",
        "「 みなと 」 と いう 名前 は 、 駅 の 近く に あった 古い 港 に 由来 する 。",
        "毎朝 、 多く の 通勤 客 が この 駅 から 都市 部 へ 向かう 。",
        "駅前 に は JR の 案内所 が あり 、 英語 で の 案内 も 受け られる 。",
    ],
    "光合成": [
        "光合成 は 、 植物 が 光 の エネルギー を 使って 二酸化炭素 と 水 から 糖 を 作る 働き で ある 。",
        "この 働き は 主に 葉 の 細胞 に ある 葉緑体 で 行われる 。",
        "光合成 に よって 作られた 酸素 は 大気 中 に 放出 さ れ 、 多く の 生き物 の 呼吸 を 支えて いる 。",
        "気温 や 光 の 強さ が 変わる と 、 光合成 の 速さ も 大きく 変化 する 。",
        "その ため 、 農業 で は 温室 を 使って 作物 が 育つ 条件 を 整える こと が ある 。",
    ],
    "図書館の歴史": [
        "この 町 の 図書館 は 、 明治 時代 に 商人 たち が 本 を 持ち寄って 作った 小さな 文庫 から 始まった 。",
        "戦争 の 間 に 建物 は 焼けた が 、 本 の 一部 は 寺 に 預け られて いた ため 残った 。",
        "戦後 、 町 の 人々 が お金 を 集め 、 新しい 図書館 が 駅 の 近く に 建て られた 。",
        "今 で は 子ども 向け の 読み聞かせ や 、 古い 地図 の 展示 など も 行われて いる 。",
        "「 本 は 町 の 記憶 で ある 」 と いう 言葉 が 入口 に 掲げ られて いる 。",
    ],
}

ZH = {
    "河边的村庄": [
        "这个 小 村庄 位于 河 的 南岸 ， 村 里 有 许多 古老 的 房屋 。",
        "村民 大多 以 种植 水稻 和 蔬菜 为 生 ， 也 有 一些 人 在 附近 的 城市 工作 。",
        "村 中 的 寺庙 建 于 清朝 ， 后来 经过 多次 修缮 。",
        "每年 夏天 都 有 不少 游客 来到 这里 ， 在 周围 的 山林 中 散步 。",
        "村 里 的 小学 大约 有 一百 名 学生 ， 大部分 老师 都 是 本地 人 。",
    ],
    "海港車站": [
        "這 座 火車站 於 1925 年 啟用 ， 當時 只 有 一 座 木造 的 小 站房 。",
        "現在 的 站房 在 1998 年 重建 ， 二 樓 設 有 一 間 圖書館 。",
        "車站 的 名稱 來自 當地 的 一 條 河流 。",
        "每天 早上 ， 許多 上班族 從 這裡 搭 車 前往 市區 。",
        "站 前 廣場 設 有 旅遊 服務 中心 ， 提供 英語 和 日語 的 諮詢 服務 。",
    ],
    "光合作用": [
        "光合作用 是 植物 利用 光能 把 二氧化碳 和 水 转化 为 糖 的 过程 。",
        "这 一 过程 主要 在 叶片 细胞 中 的 叶绿体 里 进行 。",
        "光合作用 释放 的 氧气 进入 大气 ， 维持 了 许多 生物 的 呼吸 。",
        "当 温度 或 光照 强度 发生 变化 时 ， 光合作用 的 速度 也 会 随之 改变 。",
        "因此 ， 农民 常常 利用 温室 来 调节 作物 的 生长 条件 。",
    ],
    "城市图书馆": [
        "这 座 城市 的 图书馆 最初 是 一些 商人 捐 书 建立 的 小 书屋 。",
        "战争 期间 ， 图书馆 的 房子 被 烧毁 ， 但 一部分 书 因为 放 在 寺庙 里 而 保存 了 下来 。",
        "战后 ， 市民 们 一起 募捐 ， 在 火车站 附近 建 起 了 新 的 图书馆 。",
        "如今 ， 这里 经常 举办 儿童 读书 会 和 旧 地图 展览 。",
        "图书馆 门口 写 着 一 句 话 ： “ 书 是 城市 的 记忆 。 ”",
    ],
}

# title -> sentences of documents the filter must drop, with the reason (the first failing check)
GARBAGE_JA = {
    "都道府県の一覧": ["北海道", "青森県", "岩手県", "宮城県", "秋田県", "山形県", "福島県", "茨城県"],
    "年表": ["1901 年 3 月 12 日 : 1 , 2 , 3", "1902 年 4 月 15 日 : 4 , 5 , 6", "1903 年 5 月 18 日 : 7 , 8 , 9",
           "1904 年 6 月 21 日 : 10 , 11 , 12"],
    "小さな記事": ["富士山 は 日本 で 一番 高い 山 で ある 。"],
    "統計": ["人口 は 1234567 人 、 面積 は 8901234 平方 キロ 。"] * 4,
    "English": ["The station opened in 1925 and was rebuilt in 1998 with a library upstairs.",
                "Every morning many commuters take the train from here to the city centre.",
                "The name comes from an old harbour that once stood near the station."],
}

GARBAGE_ZH = {
    "省份列表": ["河北省", "山西省", "辽宁省", "吉林省", "江苏省", "浙江省", "安徽省", "福建省"],
    "年表": ["1901 年 3 月 12 日 : 1 , 2 , 3", "1902 年 4 月 15 日 : 4 , 5 , 6", "1903 年 5 月 18 日 : 7 , 8 , 9",
           "1904 年 6 月 21 日 : 10 , 11 , 12"],
    "小条目": ["北京 是 中国 的 首都 。"],
    "统计": ["人口 为 1234567 人 ， 面积 为 8901234 平方 公里 。"] * 4,
    "日本語": unspaced(JA["光合成"]),
}
GARBAGE_REASONS = {"都道府県の一覧": "avg_words", "省份列表": "avg_words", "年表": "avg_words",
                   "小さな記事": "min_sentences", "小条目": "min_sentences", "統計": "digit_ratio", "统计": "digit_ratio",
                   "English": "language", "日本語": "language"}
