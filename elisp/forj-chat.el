;;; forj-chat.el --- The conversation buffer and the tool loop  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; `M-x forj' opens (or returns to) `*forj: PROJECT*', a conversation
;; with a language model about the current project.  The buffer is the
;; record: what the model reads on every turn is what the buffer holds,
;; parsed into messages by its role headings:
;;
;;   ## User           what the user wrote
;;   ## Assistant      what the model wrote, tool-call blocks included
;;   ## Tool results   a header line per call and its tool-result block
;;
;; The last `## User' section is the prompt: type there, `C-c C-c' sends.
;; `C-c C-m' (or `C-c ?') opens `forj-menu', a menu of everything else.
;; Replies stream in above the prompt, so the user can draft the next
;; message meanwhile.  A heading line inside a reply or a message is
;; escaped with a backslash, so only forj's own headings divide the
;; record.  Lines starting with "⚠ forj:" are notices for
;; the user (errors, stops) and are not sent to the model.
;;
;; The tool loop: when a reply ends with tool-call blocks, they run as
;; one batch through forj-tools.el (plan,
;; review, execute, results drawn under `## Tool results') and the
;; model is resumed with the results, at most
;; `forj-chat-max-tool-iterations' times per user message; past that,
;; new calls are answered "Max tool iterations reached" and the model
;; is resumed once more to answer.  `C-c C-k' stops the stream or the
;; batch and does not resume.  The tools mode (`forj-chat-tools-mode')
;; may also be parse-only (calls wait for `M-x forj-tool-result') or
;; disabled (no tools advertised; calls answered as invalid).
;;
;; `M-x forj-save' writes the chat to a file; visiting that file again
;; (its first line names the project) reopens it as a chat.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-worker)
(require 'forj-tools)
(require 'forj-provider)
(require 'forj-provider-openai)
(require 'forj-provider-anthropic)
(require 'forj-provider-gemini)
(require 'forj-provider-scripted)
(require 'forj-markdown)

(autoload 'forj-menu "forj-menu" "Open the menu of everything forj can do from here." t)

;;; Options

(defcustom forj-chat-tools-mode 'enabled
  "How the chat handles the model's tool calls.
`enabled': validate, review and execute them, then resume the model.
`parse-only': list them as pending; nothing runs until the user gives
each its result with `forj-tool-result'.
`disabled': advertise no tools; calls are answered as invalid."
  :type '(choice (const :tag "Enabled" enabled)
                 (const :tag "Parse only" parse-only)
                 (const :tag "Disabled" disabled))
  :group 'forj)

(defcustom forj-chat-max-tool-iterations 4
  "How many tool batches one user message may lead to.
Past it, new calls are answered that the limit is reached, and the
model is asked once more to answer without tools."
  :type 'natnum
  :group 'forj)

(defcustom forj-chat-extra-instructions nil
  "Text added to the end of the system prompt, or nil."
  :type '(choice (const :tag "None" nil) string)
  :group 'forj)

(defcustom forj-chat-context-bytes (* 400 1024)
  "An estimate of the model's context, in bytes of text.
Tool results are cut to fit what is left of it."
  :type 'natnum
  :group 'forj)

(defcustom forj-chat-directory (locate-user-emacs-file "forj/chats/")
  "Where `forj-save' puts chats that have no file yet."
  :type 'directory
  :group 'forj)

(defun forj-chat-set-tools-mode (mode)
  "Set the tools mode of this chat to MODE, from the next request on.
MODE is `enabled', `parse-only' or `disabled', as for
`forj-chat-tools-mode'; it holds for this chat only."
  (interactive
   (list (intern (completing-read (format "Tools mode of this chat (now %s): " forj-chat-tools-mode)
                                  '("enabled" "parse-only" "disabled") nil t))))
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (memq mode '(enabled parse-only disabled))
    (user-error "Unknown tools mode `%s'; choose enabled, parse-only or disabled" mode))
  (setq-local forj-chat-tools-mode mode)
  (force-mode-line-update)
  (message "forj: tools mode of this chat: %s" mode))

(defface forj-chat-heading
  '((t :inherit font-lock-keyword-face :weight bold :height 1.1))
  "Face for the role headings of a chat."
  :group 'forj)

(defface forj-chat-notice
  '((t :inherit warning))
  "Face for forj's notices in a chat (not sent to the model)."
  :group 'forj)

;;; Buffer state

(defvar-local forj-chat--root nil "The project root of this chat.")
(defvar-local forj-chat--provider nil "The provider plist of this chat.")
(defvar-local forj-chat--stream nil "The reply being streamed, if any.")
(defvar-local forj-chat--batch nil "The tool batch running, if any.")
(defvar-local forj-chat--state 'idle
  "What the chat is doing: `idle', `streaming' or `tools'.")
(defvar-local forj-chat--out nil "Marker: where the turn's output goes.")
(defvar-local forj-chat--reply-start nil "Marker: the start of the reply being streamed.")
(defvar-local forj-chat--iterations 0 "Tool batches run for the current user message.")
(defvar-local forj-chat--capped nil "Non-nil once the iteration cap answered a batch.")
(defvar-local forj-chat--cancelled nil "Non-nil once the user stopped the turn.")
(defvar-local forj-chat--tools nil "The worker's tool definitions.")
(defvar-local forj-chat--turn 0
  "Counts sends and stops.
A callback of an older turn finds it changed and does nothing.")
(defvar-local forj-chat--root-confirmed nil
  "Non-nil once the project root of this chat is known to be the user's choice.")
(defvar-local forj-chat--greeted nil
  "The worker whose hello warnings this chat has shown.")

(defconst forj-chat--heading-re "^## \\(User\\|Assistant\\|Tool results\\)$"
  "A role heading line.")

(defconst forj-chat--notice-prefix "⚠ forj: "
  "The start of a notice line.")

;;; The mode

(defalias 'forj-chat--parent-mode
  (if (require 'markdown-mode nil t) 'gfm-mode 'text-mode)
  "The major mode chats build on: `gfm-mode' when installed.")

(defvar forj-chat-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'forj-chat-send)
    (define-key map (kbd "C-c C-k") #'forj-chat-stop)
    (define-key map (kbd "C-c C-r") #'forj-tool-result)
    (define-key map (kbd "C-c C-o") #'forj-tools-toggle-fold)
    ;; In a terminal C-c C-m is C-c RET: both open the menu.
    (define-key map (kbd "C-c C-m") #'forj-menu)
    (define-key map (kbd "C-c ?") #'forj-menu)
    map)
  "Keymap of `forj-chat-mode'.")

(defvar forj-chat-documented-keymaps
  '(("In the chat" . forj-chat-mode-map))
  "The keymaps whose keys `describe-mode' lists in a chat, with a title each.
Each element is (TITLE . KEYMAP-VARIABLE); a variable not yet bound is
skipped.")

;;;###autoload
(define-derived-mode forj-chat-mode forj-chat--parent-mode "forj"
  "A conversation with a language model about a project.
\\<forj-chat-mode-map>
Type below the last \"## User\" heading and send with \\[forj-chat-send].
\\[forj-chat-stop] stops the reply or the running tools, and
\\[forj-menu] opens a menu of everything else.

\\{forj-chat-mode-map}"
  (font-lock-add-keywords nil `((,forj-chat--heading-re 0 'forj-chat-heading t)
                                (,(concat "^" forj-chat--notice-prefix ".*$") 0 'forj-chat-notice t)))
  (unless (derived-mode-p 'markdown-mode) (forj-markdown-setup))
  (setq-local header-line-format '(:eval (forj-chat--header-line)))
  (setq-local forj-chat--out (or forj-chat--out (copy-marker (point-max) t)))
  (forj-chat--read-metadata))

;;;###autoload
(add-to-list 'magic-mode-alist '("<!-- forj-chat " . forj-chat-mode))

(defun forj-chat--bindings (map prefix)
  "The command bindings of MAP (not of its parents) as (KEYS . COMMAND) pairs.
PREFIX, a vector, is the key sequence leading to MAP."
  (let ((found nil))
    ;; A keymap lists its latest bindings first: reversed, they come in
    ;; the order they were defined.
    (map-keymap-internal
     (lambda (event binding)
       (let ((keys (vconcat prefix (vector event))))
         (cond ((keymapp binding)
                (setq found (append (forj-chat--bindings
                                     (if (symbolp binding) (symbol-function binding) binding)
                                     keys)
                                    found)))
               ((and (symbolp binding) (commandp binding))
                (push (cons keys binding) found)))))
     map)
    found))

(defun forj-chat--command-summary (command)
  "The first line of COMMAND's docstring, or a note that it has none yet."
  (let ((doc (ignore-errors (documentation command t))))
    (cond ((not (fboundp command)) (format "`%s' (not loaded yet)" command))
          ((and doc (not (string-empty-p doc))) (car (split-string doc "\n")))
          (t (format "`%s'" command)))))

(defun forj-chat--mode-documentation ()
  "The documentation of `forj-chat-mode': its docstring's start, and every key.
Each key of `forj-chat-documented-keymaps' is listed with the first
line of its command's docstring."
  ;; The function's own docstring: the symbol's documentation is this.
  (let ((intro (car (split-string (or (documentation (symbol-function 'forj-chat-mode) t) "")
                                  "\n\\\\{" t))))
    (concat
     (string-trim-right (or intro ""))
     "\n"
     (mapconcat
      (lambda (entry)
        (let ((map (and (boundp (cdr entry)) (symbol-value (cdr entry)))))
          (if (not (keymapp map))
              ""
            (concat "\n" (car entry) ":\n\n"
                    (mapconcat (lambda (binding)
                                 (format "%-10s `%s': %s"
                                         (key-description (car binding))
                                         (cdr binding)
                                         (forj-chat--command-summary (cdr binding))))
                               (forj-chat--bindings map [])
                               "\n")
                    "\n"))))
      forj-chat-documented-keymaps "")
     "\n\\<forj-chat-mode-map>The menu (\\[forj-menu]) shows the rest; \\[customize-group] forj lists the settings.")))

;; `describe-mode' (C-h m) and `describe-function' show every key of the
;; chat with what it does, from the keymaps as they are now.
(put 'forj-chat-mode 'function-documentation '(forj-chat--mode-documentation))

(defun forj-chat--header-line ()
  "The chat's header line: provider, model, tools mode, sandbox, what is going on."
  (format " forj · %s %s · %s · tools: %s · %s"
          (or (plist-get forj-chat--provider :name) "no provider")
          (or (plist-get forj-chat--provider :model) "")
          (if forj-chat--root
              (forj-worker-sandbox-description (forj-worker-get forj-chat--root))
            "commands: no project")
          forj-chat-tools-mode
          (pcase forj-chat--state
            ('streaming "receiving…")
            ('tools "running tools…")
            (_ (substitute-command-keys "\\<forj-chat-mode-map>\\[forj-chat-send] to send")))))

(defun forj-chat--metadata-line (root)
  "The first line of a chat about ROOT."
  (format "<!-- forj-chat root: %s -->\n" (abbreviate-file-name root)))

(defun forj-chat--read-metadata ()
  "Take the project root from the chat's first line, if it names one."
  (save-excursion
    (goto-char (point-min))
    (when (looking-at "<!-- forj-chat root: \\(.*?\\) -->")
      (let ((root (expand-file-name (match-string-no-properties 1))))
        (when (file-directory-p root)
          (setq forj-chat--root (file-name-as-directory root)
                forj-tools--root forj-chat--root
                ;; A chat file from elsewhere (a download, a repository) only
                ;; names a root; the user confirms it before the first send.
                forj-chat--root-confirmed
                (and buffer-file-name
                     (file-in-directory-p buffer-file-name forj-chat-directory)))
          (forj-tools-keep-worker t))))))

;;; Entry point

;;;###autoload
(defun forj (&optional directory)
  "Open the chat about the project of DIRECTORY (default: the current one).
An existing chat of the project is shown again."
  (interactive)
  (let* ((root (forj-worker-project-root directory))
         (name (format "*forj: %s*" (file-name-nondirectory (directory-file-name root))))
         (existing (cl-find-if (lambda (b)
                                 (and (eq (buffer-local-value 'major-mode b) 'forj-chat-mode)
                                      (equal (buffer-local-value 'forj-chat--root b) root)))
                               (buffer-list))))
    (pop-to-buffer-same-window
     (or existing
         (let ((buffer (generate-new-buffer name)))
           (with-current-buffer buffer
             (insert (forj-chat--metadata-line root))
             (forj-chat-mode)
             (setq forj-chat--root root
                   forj-chat--root-confirmed t
                   forj-tools--root root)
             (forj-tools-keep-worker t)
             (let ((here (point-max)))
               (insert "\n## User\n\n")
               (set-marker forj-chat--out here))
             (setq forj-chat--provider (forj-chat--choose-provider)))
           buffer)))
    (goto-char (point-max))
    (forj-chat--start-worker)
    (current-buffer)))

(defun forj-chat--start-worker ()
  "Start the chat's worker now, for the first screen to tell how commands run."
  (let ((buffer (current-buffer)))
    (forj-worker-ensure
     forj-chat--root
     (lambda (worker)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer (forj-chat--worker-ready worker))))
     (lambda (err)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (forj-chat--notice (format "the tool worker could not start: %s"
                                      (or (plist-get err :message) err)))
           (force-mode-line-update)))))))

(defun forj-chat--worker-ready (worker)
  "Show WORKER's hello warnings as notices, once per worker start."
  (unless (eq forj-chat--greeted worker)
    (setq forj-chat--greeted worker)
    (dolist (warning (append (plist-get (forj-worker-hello worker) :warnings) nil))
      (when (stringp warning) (forj-chat--notice warning))))
  (force-mode-line-update))

(defun forj-chat--choose-provider ()
  "The provider to use; with none configured, say how to set one, and return nil."
  (or (forj-provider-pick)
      (progn
        (forj-chat--notice
         (format "no provider is configured.  Set one of %s (or add the key to auth-source), or choose one with M-x customize-variable RET forj-provider (local servers: \"ollama\", \"llama.cpp\").  M-x forj-demo replays a recorded session on a sample project, with no key and no network."
                 (string-join (forj-provider-key-variables) ", ")))
        nil)))

(defconst forj-chat--demo-directory
  (expand-file-name "demo/" (file-name-directory
                             (directory-file-name (file-name-directory
                                                   (or load-file-name buffer-file-name)))))
  "The demo's files in the forj checkout.")

;;;###autoload
(defun forj-demo ()
  "Open a chat with the scripted provider on a fresh copy of the sample project.
The recorded session reads the project, proposes an edit (you review
its diff) and answers; no key and no network are needed."
  (interactive)
  (let ((dir (file-name-as-directory (make-temp-file "forj-demo-" t))))
    (copy-directory (expand-file-name "project" forj-chat--demo-directory) dir nil nil t)
    (unless (eq 0 (ignore-errors (call-process "git" nil nil nil "-C" dir "init" "-q")))
      ;; project.el finds a root by its .git; an empty one is enough.
      (make-directory (expand-file-name ".git" dir) t))
    (let ((forj-provider "scripted"))
      (with-current-buffer (forj dir)
        (forj-chat--notice
         (format "demo: a copy of the sample project in %s, and a recorded model session.  Type anything and press C-c C-c." dir))
        (current-buffer)))))

;;;###autoload
(defun forj-run (&optional directory)
  "Open the chat on DIRECTORY, or offer the demo when no provider is configured.
This is what `make run' calls."
  (if (or (forj-provider-pick) (not (y-or-n-p "No language model provider is configured (the chat says how to set one).  Open the demo instead? ")))
      (forj directory)
    (forj-demo)))

;;; Notices

(defun forj-chat--notice (text)
  "Show TEXT as a notice line in the chat, just before the prompt."
  (save-excursion
    (goto-char forj-chat--out)
    (unless (bolp) (insert "\n"))
    (insert forj-chat--notice-prefix
            (forj-review-mark-invisible (replace-regexp-in-string "\n" " " text))
            "\n")))

;;; Reading the record

(defun forj-chat--heading-lines (beg end)
  "The role heading lines between BEG and END.
A list of (ROLE LINE-START LINE-END).
Code blocks do not hide headings: a reply cut inside a code block must
not swallow the rest of the record.  Heading lines that the model or
the user write are escaped instead (`forj-chat--escape-headings')."
  (save-excursion
    (goto-char beg)
    (let ((found nil))
      (while (re-search-forward forj-chat--heading-re end t)
        (push (list (pcase (match-string-no-properties 1)
                      ("User" "user") ("Assistant" "assistant") (_ "tool"))
                    (match-beginning 0) (match-end 0))
              found))
      (nreverse found))))

(defun forj-chat--sections (&optional end)
  "The chat's sections up to END: a list of (ROLE BEG END)."
  (let* ((end (or end (point-max)))
         (headings (forj-chat--heading-lines (point-min) end)))
    (cl-loop for (heading . rest) on headings
             collect (list (nth 0 heading)
                           (min end (1+ (nth 2 heading)))
                           (if rest (nth 1 (car rest)) end)))))

(defun forj-chat--text (beg end)
  "The text between BEG and END without notices, trimmed."
  (string-trim
   (replace-regexp-in-string
    (concat "^" forj-chat--notice-prefix ".*\n?") ""
    (buffer-substring-no-properties beg end))))

(defun forj-chat--blocks (beg end info)
  "The contents of the fenced blocks with INFO between BEG and END."
  (save-excursion
    (goto-char beg)
    (let ((found nil))
      (while (re-search-forward (concat "^```" info "[ \t]*$") end t)
        (let ((start (1+ (point))))
          (when (re-search-forward "^```[ \t]*$" end t)
            (push (buffer-substring-no-properties start (match-beginning 0)) found))))
      (nreverse found))))

(defun forj-chat--native-p ()
  "Return non-nil when this chat talks to the model through native functions."
  (and (plist-get forj-chat--provider :native-tools) (not (eq forj-chat-tools-mode 'disabled))))

(defun forj-chat-messages (&optional end)
  "The conversation up to END as provider-neutral messages."
  (let ((native (forj-chat--native-p))
        (messages nil)
        (last-calls nil))
    (dolist (section (forj-chat--sections end))
      (pcase-let ((`(,role ,beg ,send) section))
        (pcase role
          ("user"
           (let ((text (forj-chat--text beg send)))
             (unless (string-empty-p text) (push (list :role "user" :text text) messages))))
          ("assistant"
           (let* ((entries (and native (forj-tools-parse-region beg send)))
                  (calls (delq nil (mapcar (lambda (e) (plist-get e :call)) entries)))
                  (text (if native
                            (forj-chat--without-blocks beg send entries)
                          (forj-chat--text beg send))))
             (setq last-calls calls)
             (unless (and (string-empty-p text) (null calls))
               (push (list :role "assistant" :text text :calls calls) messages))))
          ("tool"
           (let ((blocks (forj-chat--blocks beg send "tool-result")))
             (if (not native)
                 (when blocks
                   (push (list :role "user"
                               :text (mapconcat (lambda (b) (concat "```tool-result\n" b "```")) blocks "\n"))
                         messages))
               (forj-chat--native-results blocks last-calls (lambda (m) (push m messages)))))))))
    (forj-chat--drop-unanswered (nreverse messages))))

(defun forj-chat--without-blocks (beg end entries)
  "The text between BEG and END without the tool-call blocks of ENTRIES."
  (let ((pieces nil) (from beg))
    (dolist (entry entries)
      (when (plist-get entry :call)
        (push (buffer-substring-no-properties from (plist-get entry :beg)) pieces)
        (setq from (plist-get entry :end))))
    (push (buffer-substring-no-properties from end) pieces)
    (with-temp-buffer
      (insert (apply #'concat (nreverse pieces)))
      (forj-chat--text (point-min) (point-max)))))

(defun forj-chat--native-results (blocks last push)
  "Give PUSH the messages for result BLOCKS that answer the list LAST.
LAST holds the native calls of the reply before.  Their results
become one tool message; any other result (of a block that was not
a call) goes as user text."
  (let ((ids (mapcar (lambda (c) (plist-get c :id)) last))
        (results nil) (others nil))
    (dolist (block blocks)
      (let ((json (ignore-errors (forj-tools-json-decode block))))
        (if (and json (member (plist-get json :id) ids))
            (push (list :id (plist-get json :id) :name (plist-get json :name)
                        :content (string-trim block))
                  results)
          (push (concat "```tool-result\n" block "```") others))))
    (when results (funcall push (list :role "tool" :results (nreverse results))))
    (when others (funcall push (list :role "user" :text (string-join (nreverse others) "\n"))))))

(defun forj-chat--drop-unanswered (messages)
  "Drop from MESSAGES each native call left without a result.
Providers refuse a call left unanswered (a stopped turn leaves some)."
  (cl-loop for (message . rest) on messages
           collect (if (and (equal (plist-get message :role) "assistant") (plist-get message :calls))
                       (let* ((next (car rest))
                              (answered (and (equal (plist-get next :role) "tool")
                                             (mapcar (lambda (r) (plist-get r :id))
                                                     (plist-get next :results)))))
                         (plist-put (copy-sequence message) :calls
                                    (cl-remove-if-not (lambda (c) (member (plist-get c :id) answered))
                                                      (plist-get message :calls))))
                     message)))

;;; The system prompt

(defun forj-chat-system-prompt ()
  "The system prompt for this chat: the tools, the protocol, the rules."
  (let ((root forj-chat--root)
        (tools (append forj-chat--tools nil)))
    (concat
     "You are forj, a coding agent working inside Emacs with a user on the project at "
     root ".  Answer in Markdown.\n\n"
     (cond
      ((eq forj-chat-tools-mode 'disabled)
       "Tools are disabled in this conversation: answer from what the user shows you.\n")
      ((forj-chat--native-p)
       (concat "Use the functions you are given to read and change the project.  "
               (forj-chat--rules)))
      (t
       (concat
        "## Tools\n\n"
        "To use a tool, write a fenced code block with the info string `tool-call` holding "
        "one JSON object: a unique \"id\", the tool's \"name\" and its \"args\".  One call per "
        "block; you may write several blocks in one message, and they run in order.  Then "
        "stop and wait: forj runs the calls (the user reviews edits first) and answers with "
        "one `tool-result` block per call: {\"id\", \"name\", \"ok\": true, \"result\"} or "
        "{\"id\", \"name\", \"ok\": false, \"error\": {\"type\", \"message\", \"details\", "
        "\"recovery\"}}.  Follow the recovery steps of an error.\n\n"
        "Example:\n\n"
        "```tool-call\n{\"id\": \"1\", \"name\": \"read_file\", \"args\": {\"path\": \"README.md\"}}\n```\n\n"
        "answered by\n\n"
        "```tool-result\n{\"id\": \"1\", \"name\": \"read_file\", \"ok\": true, \"result\": "
        "{\"path\": \"README.md\", \"content\": \"# Demo\\n\", \"truncated\": false}}\n```\n\n"
        (forj-chat--rules)
        "\n## The tools (JSON Schema of args)\n\n"
        (mapconcat (lambda (tool)
                     (format "### %s\n%s\nargs: %s\n"
                             (plist-get tool :name) (plist-get tool :description)
                             (forj-tools-json-encode (plist-get tool :parameters))))
                   tools "\n"))))
     (if forj-chat-extra-instructions (concat "\n" forj-chat-extra-instructions "\n") ""))))

(defun forj-chat--rules ()
  "The rules the model will meet."
  (concat
   "Rules: paths are relative to the project root and stay inside it.  Read a file "
   "(read_file) before you change it, and read it again if it changed; an edit based on "
   "stale content is refused.  Prefer `edit` or `edit_region` to rewriting whole files.  "
   "The user may deny a call and say why: take the reason into account.  Keep going until "
   "the task is done, then answer without tool calls.\n"))

;;; Sending and the loop

(defun forj-chat-send ()
  "Send the text after the last \"## User\" heading to the model."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq forj-chat--state 'idle)
    (user-error (substitute-command-keys
                 "A reply is still under way; \\<forj-chat-mode-map>\\[forj-chat-stop] stops it (your text is kept)")))
  (let* ((last (car (last (forj-chat--heading-lines (point-min) (point-max)))))
         (beg (and last (equal (car last) "user") (1+ (nth 2 last))))
         (text (and beg (forj-chat--text (min beg (point-max)) (point-max)))))
    (cond
     ((null beg) (goto-char (point-max)) (insert "\n\n## User\n\n")
      (user-error "Type your message below the last \"## User\" heading"))
     ((string-empty-p text) (user-error "Type your message below the last \"## User\" heading"))
     ((null forj-chat--provider)
      (setq forj-chat--provider (forj-chat--choose-provider))
      (unless forj-chat--provider (user-error "No provider; see the notice in the chat"))))
    (unless (or forj-chat--root-confirmed
                (yes-or-no-p (format "This chat file names the project %s; let the model work there? "
                                     forj-chat--root)))
      (user-error "Not sent; open a chat on your project with M-x forj"))
    (setq forj-chat--root-confirmed t)
    (forj-chat--escape-headings beg (point-max))
    (cl-incf forj-chat--turn)
    (setq forj-chat--iterations 0 forj-chat--capped nil forj-chat--cancelled nil)
    (goto-char (point-max))
    (skip-chars-backward " \t\n")
    (delete-region (point) (point-max))
    (insert "\n\n")
    (let ((here (point)))
      (insert "\n## User\n\n")
      (set-marker forj-chat--out here))
    (goto-char (point-max))
    (forj-chat--with-worker #'forj-chat--request)))

(defun forj-chat--with-worker (then)
  "Start the project's worker if needed, learn its tools, then call THEN."
  (let ((buffer (current-buffer))
        (turn forj-chat--turn))
    (setq forj-chat--state 'streaming)
    (forj-worker-ensure
     forj-chat--root
     (lambda (worker)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (forj-chat--worker-ready worker)
           (when (= turn forj-chat--turn)
             (setq forj-chat--tools (plist-get (forj-worker-hello worker) :tools))
             (funcall then)))))
     (lambda (err)
       (when (and (buffer-live-p buffer) (= turn (buffer-local-value 'forj-chat--turn buffer)))
         (with-current-buffer buffer
           (forj-chat--notice (format "the tool worker could not start: %s"
                                      (or (plist-get err :message) err)))
           (forj-chat--end-turn)))))))

(defun forj-chat--insert-out (text)
  "Insert TEXT at the output marker, keeping the user's point where it is."
  (save-excursion
    (goto-char forj-chat--out)
    (insert text)))

(defun forj-chat--request ()
  "Start the model's next reply under a new \"## Assistant\" heading."
  (let ((buffer (current-buffer))
        (messages (forj-chat-messages forj-chat--out)))
    (forj-chat--insert-out "## Assistant\n\n")
    (setq forj-chat--reply-start (copy-marker forj-chat--out)
          forj-chat--state 'streaming)
    (force-mode-line-update)
    (setq forj-chat--stream
          (forj-provider-start
           forj-chat--provider (forj-chat-system-prompt) messages
           (and (not (eq forj-chat-tools-mode 'disabled)) (append forj-chat--tools nil))
           (list :on-text (lambda (text)
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (forj-chat--insert-out text))))
                 :on-call (lambda (call)
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (forj-chat--insert-call call))))
                 :on-done (lambda ()
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (forj-chat--reply-done))))
                 :on-error (lambda (message)
                             (when (buffer-live-p buffer)
                               (with-current-buffer buffer
                                 (forj-chat--reply-failed message)))))))))

(defun forj-chat--insert-call (call)
  "Write a native CALL as a tool-call block, to keep it in the record."
  (save-excursion
    (goto-char forj-chat--out)
    (unless (bolp) (insert "\n"))
    (insert "\n```tool-call\n"
            (forj-tools-json-encode (list :id (or (plist-get call :id) "")
                                          :name (or (plist-get call :name) "")
                                          :args (plist-get call :args)))
            "\n```\n")))

(defun forj-chat--escape-headings (beg end)
  "Escape role heading and notice lines between BEG and END, so they stay text.
Only forj writes headings that divide the record, and notices."
  (save-excursion
    (let ((end (copy-marker end)))
      (dolist (heading (reverse (forj-chat--heading-lines beg end)))
        (goto-char (nth 1 heading))
        (insert "\\"))
      (goto-char beg)
      (while (re-search-forward (concat "^" forj-chat--notice-prefix) end t)
        (goto-char (match-beginning 0))
        (insert "\\")
        (forward-line 1))
      (set-marker end nil))))

(defun forj-chat--finish-reply ()
  "Tidy the reply just streamed: escape headings, end it with a newline."
  (forj-chat--escape-headings forj-chat--reply-start forj-chat--out)
  (save-excursion
    (goto-char forj-chat--out)
    (unless (bolp) (insert "\n")))
  (setq forj-chat--stream nil))

(defun forj-chat--reply-failed (message)
  "The reply ended in MESSAGE: keep the text, say what happened, end the turn."
  (forj-chat--finish-reply)
  (forj-chat--notice (concat message "  (the text so far is kept; send \"continue\" to try again)"))
  (forj-chat--end-turn))

(defun forj-chat--reply-done ()
  "Finish a complete reply: run the tool-call blocks in it, or end the turn."
  (forj-chat--finish-reply)
  (let ((calls (forj-tools-parse-region forj-chat--reply-start forj-chat--out)))
    (cond
     ((null calls) (forj-chat--end-turn))
     ((>= forj-chat--iterations forj-chat-max-tool-iterations)
      (forj-chat--refuse-batch))
     (t (forj-chat--run-batch)))))

(defun forj-chat--results-heading ()
  "Start the \"## Tool results\" section at the output marker."
  (forj-chat--insert-out "\n## Tool results\n\n"))

(defun forj-chat--run-batch ()
  "Run the tool-call blocks of the reply as one batch, then resume the model."
  (cl-incf forj-chat--iterations)
  (let ((buffer (current-buffer))
        (turn forj-chat--turn)
        (beg (marker-position forj-chat--reply-start)))
    (setq forj-chat--reply-start nil)
    (forj-chat--results-heading)
    (setq forj-chat--state 'tools)
    (force-mode-line-update)
    (setq-local forj-tools-capacity-bytes
                (max 4096 (- forj-chat-context-bytes (buffer-size))))
    (let ((forj-tools-plan-mode (pcase forj-chat-tools-mode
                                  ('parse-only "parse_only")
                                  ('disabled "disabled")
                                  (_ "enabled"))))
      (setq forj-chat--batch
            (forj-tools-run-region
             beg forj-chat--out
             (lambda (_results)
               (when (buffer-live-p buffer)
                 (with-current-buffer buffer (forj-chat--batch-done turn))))
             forj-chat--root)))))

(defun forj-chat--batch-done (turn)
  "The batch of TURN has its results: resume the model, unless the user stopped."
  (let ((batch forj-chat--batch))
    (when batch
      (set-marker forj-chat--out (forj-tools-batch-end batch))
      (setq forj-chat--batch nil))
    (forj-chat--insert-out "\n")
    (if (or forj-chat--cancelled
            (/= turn forj-chat--turn)
            (and batch (forj-tools-batch-cancelled batch)))
        (progn
          (when (and batch (forj-tools-batch-cancelled batch))
            (forj-chat--notice "the batch was cancelled in review; the model was not resumed"))
          (forj-chat--end-turn))
      (forj-chat--request))))

(defun forj-chat--refuse-batch ()
  "Refuse the tool-call blocks of the reply: the iteration limit is reached.
Resume the model once more at most."
  (let ((buffer (current-buffer))
        (beg (marker-position forj-chat--reply-start))
        (again forj-chat--capped))
    (setq forj-chat--capped t)
    (forj-chat--results-heading)
    (let ((batch (forj-tools-refuse-region
                  beg forj-chat--out
                  (format "Max tool iterations reached (%d per user message); no call was run"
                          forj-chat-max-tool-iterations))))
      (set-marker forj-chat--out (forj-tools-batch-end batch))
      (forj-chat--insert-out "\n")
      (if again
          (progn
            (forj-chat--notice "the model kept calling tools past the iteration limit; stopped.  Send a message to go on.")
            (forj-chat--end-turn))
        (with-current-buffer buffer (forj-chat--request))))))

(defun forj-chat--end-turn ()
  "The turn is over: the prompt is the user's again."
  (setq forj-chat--state 'idle
        forj-chat--reply-start nil
        forj-chat--stream nil
        forj-chat--batch nil)
  (force-mode-line-update)
  (when (and (get-buffer-window (current-buffer)) (not noninteractive))
    (message "forj: your turn")))

(defun forj-chat-stop ()
  "Stop the reply being streamed or the tools running; do not resume."
  (interactive)
  (setq forj-chat--cancelled t)
  (cl-incf forj-chat--turn)
  (pcase forj-chat--state
    ('streaming
     (forj-provider-stop forj-chat--stream)
     (when forj-chat--reply-start (forj-chat--finish-reply))
     (forj-chat--notice "stopped by the user")
     (forj-chat--end-turn))
    ('tools
     (let ((batch forj-chat--batch))
       (cond
        ((null batch) (forj-chat--end-turn))
        ((forj-tools--manual-entries batch)
         ;; Parse-only: the calls waiting for the user's results are cancelled.
         (forj-tools--fail-all batch (list :type "cancelled" :message "The user stopped the turn"
                                           :recovery ["Ask the user how to go on"])))
        (t
         (let ((review (forj-tools-batch-review batch)))
           (when (buffer-live-p review)
             (with-current-buffer review (forj-review-cancel))))
         (when (and (forj-tools-batch-batch-id batch) (forj-tools-batch-worker batch))
           (forj-epc-call (forj-worker-connection (forj-tools-batch-worker batch)) "cancel"
                          (list :batch_id (forj-tools-batch-batch-id batch))))
         (message "forj: stopping the tools…")))))
    (_ (message "forj: nothing to stop"))))

;;; Saving

(defun forj-save (&optional file)
  "Save this chat to FILE.
FILE defaults to the chat's file, or a new one in `forj-chat-directory'.
Visiting the file later opens it as a chat again."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (cond
   (file (write-file file))
   (buffer-file-name (save-buffer))
   (t (make-directory forj-chat-directory t)
      (write-file (expand-file-name
                   (format "%s-%s.md"
                           (file-name-nondirectory (directory-file-name forj-chat--root))
                           (format-time-string "%Y%m%d-%H%M%S"))
                   forj-chat-directory))))
  (message "forj: chat saved to %s" (abbreviate-file-name buffer-file-name)))

(provide 'forj-chat)
;;; forj-chat.el ends here
