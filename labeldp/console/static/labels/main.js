// The labels party's (advertiser's) console: datasets, budget, ledger, releases and their audits,
// planning a release. Every view reads the public REST API (docs/console.md lists which route).

import { start } from "../common/app.js";
import { datasetPage, datasetsPage } from "./datasets.js";
import { ledgerPage } from "./ledger.js";
import { partiesPage } from "./parties.js";
import { planPage } from "./plan.js";
import { releasePage, releasesPage } from "./releases.js";

start({
  title: "labels party (advertiser)",
  home: "#/datasets",
  nav: [
    ["#/datasets", "Datasets"],
    ["#/releases", "Releases"],
    ["#/ledger", "Ledger"],
    ["#/parties", "Identity and recipients"],
  ],
  routes: [
    [/^\/datasets$/, datasetsPage],
    [/^\/datasets\/([^/]+)$/, datasetPage],
    [/^\/datasets\/([^/]+)\/plan$/, planPage],
    [/^\/releases$/, releasesPage],
    [/^\/releases\/([^/]+)$/, releasePage],
    [/^\/ledger$/, ledgerPage],
    [/^\/parties$/, partiesPage],
  ],
});
